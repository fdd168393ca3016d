"""What ``memkiln publish`` puts where each agent loads memory, as pure functions.

- the folder names each agent derives from a path (Claude Code's ``projects/<name>``, Oh My
  Pi's ``memories/<name>``);
- the marked block memkiln keeps in a file it does not own (Claude Code's ``MEMORY.md``):
  spliced in at the top, so it is loaded, and taken out again leaving the file's other bytes
  exactly as they were;
- the marker line of a file memkiln owns (with a digest of what memkiln wrote, so a file
  edited since is recognised and left alone);
- the texts: Claude Code's block and topic file, Oh My Pi's summary, and Codex's one
  global summary within 2,500 tokens and 10,000 bytes.

Every text opens with ``MEMORY_GUIDANCE``. Nothing here reads or writes a file: the writer is
``memkiln.io.publish``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath, PureWindowsPath

from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.report import Section
from memkiln.transforms.text import clean_text, one_line
from memkiln.transforms.tokens import count_tokens

#: The agents memkiln publishes to, in the order they are done.
TARGETS = ("claude", "omp", "codex")

#: Claude Code loads the first 200 lines of ``MEMORY.md``, and at most 25 KB of it.
CLAUDE_LOADED_LINES = 200
CLAUDE_LOADED_BYTES = 25_000
#: memkiln's block in ``MEMORY.md`` takes at most this much of what is loaded.
CLAUDE_BLOCK_LINES = 40
CLAUDE_BLOCK_BYTES = 6_000
#: Claude Code keeps a folder name to 200 characters (a longer one gets a hash suffix).
CLAUDE_NAME_CHARS = 200
#: The topic file memkiln owns beside ``MEMORY.md`` (read on demand).
CLAUDE_TOPIC = "memkiln.md"
TOPIC_BYTES = 64_000
#: Oh My Pi injects ``memory_summary.md`` (about 5,000 tokens at 4 characters each).
OMP_SUMMARY_TOKENS = 4_000
OMP_SUMMARY_BYTES = 16_000
OMP_DETAILS_BYTES = 64_000
#: Codex injects ``memory_summary.md`` trimmed to 2,500 tokens.
CODEX_TOKENS = 2_500
CODEX_BYTES = 10_000
#: Do/avoid lines per project in Codex's summary at most.
CODEX_LINES_PER_PROJECT = 6

#: A marked block: the first line starts with ``BLOCK_BEGIN``, the last is ``BLOCK_END``.
BLOCK_BEGIN = "<!-- memkiln:begin"
BLOCK_END = "<!-- memkiln:end -->"
#: Said in the first line of a block when memkiln created the file for it (``--remove``
#: deletes such a file when nothing else is left in it).
CREATED_FILE = "created-file"
#: The last line of a file memkiln owns: ``<!-- memkiln:owned sha256=<16 hex> … -->``.
OWNED_PREFIX = "<!-- memkiln:owned sha256="
_OWNED = re.compile(r"\n?<!-- memkiln:owned sha256=([0-9a-f]{16})[^\n]*-->\n?\Z")
#: The file marking a folder memkiln created (``--remove`` removes the folder when empty).
FOLDER_MARKER = ".memkiln-publish"
FOLDER_MARKER_TEXT = "This folder was created by memkiln publish; --remove deletes it.\n"


class BrokenBlockError(ValueError):
    """A file holds memkiln's begin line without its end line (someone edited it)."""


# -- folder names ------------------------------------------------------------------------


def claude_dirname(path: str) -> str:
    """Claude Code's folder name for a path: every UTF-16 code unit that is not an ASCII
    letter or digit becomes ``-`` (``/Users/a/Build/FundWise`` -> ``-Users-a-Build-FundWise``,
    ``E:\\CC-test`` -> ``E--CC-test``). Names longer than ``CLAUDE_NAME_CHARS`` are cut
    and suffixed by Claude Code with a hash; the writer looks those up instead."""
    out = []
    for ch in path:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append("--" if ord(ch) > 0xFFFF else "-")  # a surrogate pair in JavaScript
    return "".join(out)


def omp_dirname(cwd: str) -> str:
    """Oh My Pi's ``encodeProjectPath``: one leading ``/`` or ``\\`` dropped, every ``/``,
    ``\\`` and ``:`` made ``-``, wrapped in ``--`` (``/home/u/proj`` -> ``--home-u-proj--``)."""
    trimmed = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    return "--" + re.sub(r"[/\\:]", "-", trimmed) + "--"


def is_absolute(path: str) -> bool:
    """A path an agent could have run in: absolute on POSIX or on Windows."""
    return PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute()


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that are not inside another of them (sorted): a session started in a
    sub-folder of a repository shares the repository's memory in Claude Code."""
    ordered = sorted(set(paths), key=lambda p: (len(p), p))
    kept: list[str] = []
    for path in ordered:
        norm = path.replace("\\", "/").rstrip("/").lower()
        if not any(norm.startswith(k.replace("\\", "/").rstrip("/").lower() + "/") for k in kept):
            kept.append(path)
    return sorted(kept)


# -- blocks and owned files ---------------------------------------------------------------


def block_span(text: str) -> tuple[int, int] | None:
    """Where memkiln's block is in ``text`` (start, end; end past its last newline)."""
    start = 0
    while True:
        start = text.find(BLOCK_BEGIN, start)
        if start == -1:
            return None
        if start == 0 or text[start - 1] == "\n":
            break
        start += 1
    end = text.find("\n" + BLOCK_END, start)
    if end == -1:
        raise BrokenBlockError("memkiln's block has a begin line and no end line")
    stop = end + 1 + len(BLOCK_END)
    if text[stop : stop + 1] == "\n":
        stop += 1
    return start, stop


def unsplice(text: str) -> tuple[str, bool]:
    """``text`` without memkiln's block, and whether the block said memkiln created the
    file. Text without a block comes back unchanged."""
    span = block_span(text)
    if span is None:
        return text, False
    start, stop = span
    first = text[start : text.find("\n", start)]
    return text[:start] + text[stop:], CREATED_FILE in first


def splice(existing: str | None, block_body: str) -> str:
    """The file with memkiln's block (``block_body``, lines without the markers) at its top,
    replacing any block it held; the rest of the file is kept byte for byte."""
    if existing is None:
        rest, created = "", True
    else:
        rest, created = unsplice(existing)
    begin = (
        f"{BLOCK_BEGIN}{' ' + CREATED_FILE if created else ''}: written by memkiln publish; "
        "edit outside this block -->"
    )
    return f"{begin}\n{block_body.rstrip(chr(10))}\n{BLOCK_END}\n{rest}"


def owned(body: str) -> str:
    """A file memkiln owns: ``body`` and a last line with the digest of ``body``."""
    text = body.rstrip("\n") + "\n"
    return (
        f"{text}{OWNED_PREFIX}{_digest(text)} written by memkiln publish; edit this file and "
        "memkiln leaves it alone -->\n"
    )


def ownership(text: str) -> str:
    """``owned`` (memkiln wrote it, unchanged since), ``edited`` (memkiln's marker, but
    the text above it changed) or ``foreign`` (no marker: the agent's or the user's)."""
    found = _OWNED.search(text)
    if found is None:
        return "foreign"
    body = text[: found.start()] + "\n"
    return "owned" if _digest(body) == found.group(1) else "edited"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def safe(text: str, rules: RuleSet) -> str:
    """What memkiln writes: control and invisible characters removed, secrets redacted
    (again: the memory files are redacted when consolidated)."""
    return redact_text(clean_text(text), rules=rules)


# -- what the agents load ------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectMemory:
    """A project's memory as consolidate wrote it."""

    key: str
    folder: str  # absolute path of its memory folder
    summary: str  # memory_summary.md
    details: str  # MEMORY.md ("" when absent)
    last_active: datetime | None = None


def summary_lines(summary: str) -> list[str]:
    """``memory_summary.md`` as lines an agent loads: from its first section on (its preamble,
    the ``v1`` format line, the title, the line saying where details are, is memkiln's own),
    without the guidance line (each target writes its own first); runs of blank lines made
    one. A summary without sections (a model's) loses only those lines."""
    lines = summary.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
    if first is not None:
        lines = lines[first:]
    out: list[str] = []
    titled = first is not None
    for line in lines:
        stripped = line.strip()
        if stripped == MEMORY_GUIDANCE:
            continue
        if stripped == "v1" and not any(o.strip() for o in out):  # the format line
            continue
        if not titled and stripped.startswith("# "):
            titled = True
            continue
        if not stripped and (not out or not out[-1].strip()):
            continue
        out.append(line.rstrip())
    while out and not out[-1].strip():
        out.pop()
    return out


def with_guidance(text: str) -> str:
    """``text`` opening with the guidance line (not repeated when it already does)."""
    body = text.lstrip("\n")
    if body.startswith(MEMORY_GUIDANCE):
        return body
    return f"{MEMORY_GUIDANCE}\n\n{body}"


def _fit_lines(
    head: Sequence[str], lines: Sequence[str], tail: Sequence[str], *, max_lines: int,
    max_bytes: int, more: str,
) -> list[str] | None:  # fmt: skip
    """``head + lines + tail`` with as many of ``lines`` as fit ``max_lines`` and
    ``max_bytes`` (joined by newlines, with a final newline); a line ``more`` says what was
    left out. None when not even ``head + tail`` fits."""

    def size(parts: Sequence[str]) -> tuple[int, int]:
        return len(parts), sum(len(p.encode("utf-8")) + 1 for p in parts)

    n, b = size([*head, *tail])
    if n > max_lines or b > max_bytes:
        return None
    kept: list[str] = []
    for i, line in enumerate(lines):
        left = len(lines) - i - 1
        reserve = size([more]) if left else (0, 0)
        ln, lb = size([line])
        if n + ln + reserve[0] > max_lines or b + lb + reserve[1] > max_bytes:
            if size([*head, *kept, more, *tail])[0] <= max_lines and (
                size([*head, *kept, more, *tail])[1] <= max_bytes
            ):
                kept.append(more)
            break
        kept.append(line)
        n, b = n + ln, b + lb
    return [*head, *kept, *tail]


def claude_block(
    memory: ProjectMemory, *, rest: str, rules: RuleSet, topic: str = CLAUDE_TOPIC
) -> str | None:
    """The lines of memkiln's block in Claude Code's ``MEMORY.md`` (without the markers):
    the guidance line, the project's most useful lines, and a pointer to the topic file;
    sized so that the file (``rest`` is the file without the block) stays within what Claude
    Code loads. None when the user's own lines leave no room."""
    free_lines = min(CLAUDE_BLOCK_LINES, CLAUDE_LOADED_LINES - line_count(rest)) - 2  # markers
    free_bytes = min(CLAUDE_BLOCK_BYTES, CLAUDE_LOADED_BYTES - len(rest.encode("utf-8"))) - 160
    head = [MEMORY_GUIDANCE, f"## Memory from past sessions: {one_line(memory.key, 120)}"]
    tail = [
        f"- More in [{topic}]({topic}) here; the rollout_summaries/ named above are in "
        f"{one_line(memory.folder, 300)}"
    ]
    lines = [safe(line, rules) for line in summary_lines(memory.summary)]
    fitted = _fit_lines(
        head, lines, tail, max_lines=free_lines, max_bytes=free_bytes, more=f"- … more in {topic}"
    )
    if fitted is None:
        return None
    return safe("\n".join(fitted), rules)


def _capped(text: str, max_bytes: int, note: str) -> str:
    """``text`` cut at a line boundary to ``max_bytes`` (UTF-8), the cut saying ``note``."""
    if len(text.encode("utf-8")) <= max_bytes:
        return text
    kept: list[str] = []
    used = len(note.encode("utf-8")) + 2
    for line in text.splitlines():
        size = len(line.encode("utf-8")) + 1
        if used + size > max_bytes:
            break
        kept.append(line)
        used += size
    return "\n".join([*kept, note]) + "\n"


def claude_topic(memory: ProjectMemory, *, rules: RuleSet) -> str:
    """The topic file memkiln owns beside ``MEMORY.md``: the summary and the details."""
    folder = one_line(memory.folder, 300)
    parts = [
        MEMORY_GUIDANCE,
        "",
        f"# memkiln memory: {one_line(memory.key, 120)}",
        "",
        f"Written by memkiln from its memory folder {folder} (rollout_summaries/ there hold "
        "each session's summary).",
        "",
        *summary_lines(memory.summary),
        "",
        memory.details.strip(),
    ]
    text = "\n".join(parts).rstrip() + "\n"
    return _capped(safe(text, rules), TOPIC_BYTES, f"… cut here; the rest is in {folder}")


def omp_summary(memory: ProjectMemory, *, rules: RuleSet) -> str:
    """Oh My Pi's ``memory_summary.md`` for one project (injected at session start)."""
    folder = one_line(memory.folder, 300)
    head = [
        MEMORY_GUIDANCE,
        "",
        f"# Memory summary: {one_line(memory.key, 120)}",
        "",
        f"Written by memkiln; details in MEMORY.md here and in {folder}.",
        "",
    ]
    lines = [safe(line, rules) for line in summary_lines(memory.summary)]
    kept = list(head)
    for line in lines:
        trial = "\n".join([*kept, line]) + "\n"
        if len(trial.encode("utf-8")) > OMP_SUMMARY_BYTES or count_tokens(trial) > (
            OMP_SUMMARY_TOKENS
        ):
            kept.append("- … more in MEMORY.md")
            break
        kept.append(line)
    return safe("\n".join(kept).rstrip() + "\n", rules)


def omp_details(memory: ProjectMemory, *, rules: RuleSet) -> str:
    """Oh My Pi's ``MEMORY.md`` (read on demand): memkiln's ``MEMORY.md``, guidance first."""
    folder = one_line(memory.folder, 300)
    text = with_guidance(memory.details.strip() or f"# Memory: {one_line(memory.key, 120)}")
    return _capped(safe(text, rules), OMP_DETAILS_BYTES, f"… cut here; the rest is in {folder}")


_HEADING = re.compile(r"^(#{2,6})\s+(.*)$")


def do_and_avoid(summary: str) -> list[str]:
    """The bullets a project's summary leads with: those of its do/avoid section (or, in a
    summary without one, its first bullets)."""
    in_section = False
    found: list[str] = []
    bullets: list[str] = []
    for line in summary.splitlines():
        heading = _HEADING.match(line)
        if heading and len(heading.group(1)) == 2:
            in_section = bool(re.search(r"\b(do|avoid)\b", heading.group(2), re.IGNORECASE))
            continue
        if line.startswith("- "):
            bullets.append(line)
            if in_section:
                found.append(line)
    return found or bullets


def preferences(summary: str) -> list[str]:
    """The bullets under a heading about the user's preferences."""
    out: list[str] = []
    inside = False
    for line in summary.splitlines():
        heading = _HEADING.match(line)
        if heading:
            inside = "prefer" in heading.group(2).lower()
            continue
        if inside and line.startswith("- "):
            out.append(line)
    return out


def _words(line: str) -> str:
    return " ".join(sorted(set(re.findall(r"[a-z0-9]+", line.lower()))))


def shared_preferences(memories: Sequence[ProjectMemory]) -> list[str]:
    """Preferences stated in at least two projects (the same words, whatever the order,
    case or punctuation), the ones from most projects first."""
    seen: dict[str, tuple[str, set[str]]] = {}
    for memory in memories:
        for line in preferences(memory.summary):
            key = _words(line)
            if key:
                seen.setdefault(key, (line, set()))[1].add(memory.key)
    shared = [(len(keys), text) for text, keys in seen.values() if len(keys) >= 2]
    return [text for _, text in sorted(shared, key=lambda t: (-t[0], t[1]))]


def codex_summary(
    memories: Sequence[ProjectMemory],
    *,
    index: str,
    rules: RuleSet,
    max_tokens: int = CODEX_TOKENS,
    max_bytes: int = CODEX_BYTES,
) -> str:
    """Codex's one global ``memory_summary.md``: the guidance line, the preferences shared by
    projects, then the projects most recently active first, each with a line pointing at its
    folder and its do/avoid lines while they fit; projects past the budget are named in a
    last line pointing at ``index`` (memkiln's INDEX.md)."""
    ordered = sorted(
        memories,
        key=lambda m: (m.last_active.timestamp() if m.last_active else float("-inf"), m.key),
        reverse=True,
    )
    parts: list[str] = [
        MEMORY_GUIDANCE,
        "",
        "# Memory from past sessions, all projects (written by memkiln)",
        "",
        "Each project's own memory is in its folder below; open it before working there.",
    ]
    shared = shared_preferences(ordered)
    if shared:
        parts += ["", "## The user's preferences across projects", ""]
        parts += shared[:10]
    parts += ["", "## Projects, most recently active first"]

    def fits(lines: Sequence[str], reserve: str) -> bool:
        text = safe("\n".join([*lines, reserve]) + "\n", rules)
        return len(text.encode("utf-8")) <= max_bytes and count_tokens(text) <= max_tokens

    left_out = 0
    for i, memory in enumerate(ordered):
        rest = len(ordered) - i - 1
        reserve = f"- … {rest} more projects: {one_line(index, 300)}" if rest else ""
        when = f"{memory.last_active:%Y-%m-%d}" if memory.last_active else "undated"
        head = [
            "",
            f"### {one_line(memory.key, 120)} (last active {when})",
            f"Folder: {one_line(memory.folder, 300)}/memory_summary.md",
        ]
        if not fits([*parts, *head], reserve):
            left_out = len(ordered) - i
            break
        parts += head
        for line in do_and_avoid(memory.summary)[:CODEX_LINES_PER_PROJECT]:
            line = one_line(line, 300)
            if not fits([*parts, line], reserve):
                break
            parts.append(line)
    if left_out:
        parts += ["", f"- … {left_out} more projects: {one_line(index, 300)}"]
    return safe("\n".join(parts).rstrip() + "\n", rules)


def codex_block(
    memories: Sequence[ProjectMemory], *, existing: str, index: str, rules: RuleSet
) -> str:
    """memkiln's block in a ``memory_summary.md`` Codex wrote (``--codex-alongside``): the
    global summary in what the 2,500 tokens Codex injects leave after Codex's own text (at
    least 600 tokens)."""
    rest, _ = unsplice(existing)
    tokens = max(600, CODEX_TOKENS - count_tokens(rest) - 40)
    size = max(2_500, CODEX_BYTES - len(rest.encode("utf-8")) - 200)
    return codex_summary(memories, index=index, rules=rules, max_tokens=tokens, max_bytes=size)


# -- what a publish did ---------------------------------------------------------------------

#: What a publish does to one path: create it, change it, leave it (unchanged), remove it,
#: or skip it (with a reason).
ACTIONS = ("create", "change", "keep", "remove", "skip")


@dataclass
class Step:
    """One path of one target: what was (or, in a dry run, would be) done, and why."""

    target: str
    path: str
    action: str
    size: int = 0  # bytes of the file after the step
    project_key: str | None = None
    kind: str = "file"  # file (memkiln's own) | block (in a file memkiln does not own) | folder
    reason: str = ""


@dataclass
class PublishSummary:
    """A publish's steps and the lines it says (targets skipped, files left alone)."""

    run_id: str = ""
    dry_run: bool = False
    remove: bool = False
    steps: list[Step] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    skipped_targets: dict[str, str] = field(default_factory=dict)

    def written(self, target: str | None = None) -> int:
        """Files created or changed (of one target, or of all)."""
        return sum(
            1
            for s in self.steps
            if s.action in ("create", "change")
            and s.kind != "folder"
            and (target is None or s.target == target)
        )

    def removed(self, target: str | None = None) -> int:
        return sum(
            1
            for s in self.steps
            if s.action == "remove" and s.kind != "folder" and (target in (None, s.target))
        )

    def failed(self) -> list[Step]:
        """Files memkiln could not read or write (the publish exits 1)."""
        return [s for s in self.steps if s.reason.startswith(("cannot read", "cannot write"))]

    def counters(self) -> dict[str, float | None]:
        return {"files_written": self.written(), "files_removed": self.removed()}


def publish_section(summary: PublishSummary) -> Section:
    """The run summary's rows: per target, files written, left unchanged, removed and
    skipped (or why the target was skipped)."""
    title = "memkiln publish" + (" (dry run: nothing written)" if summary.dry_run else "")
    rows: list[tuple[str, str]] = []
    for target in TARGETS:
        if target in summary.skipped_targets:
            rows.append((target, "skipped"))
            continue
        mine = [s for s in summary.steps if s.target == target and s.kind != "folder"]
        if not mine:
            continue
        would = "would be " if summary.dry_run else ""
        if summary.remove:
            rows.append((f"{target}: files {would}removed", str(summary.removed(target))))
            rows.append((f"{target}: files {would}restored", str(summary.written(target))))
        else:
            rows.append((f"{target}: files {would}written", str(summary.written(target))))
            rows.append((f"{target}: unchanged", str(sum(1 for s in mine if s.action == "keep"))))
        skipped = sum(1 for s in mine if s.action == "skip")
        if skipped:
            rows.append((f"{target}: left alone", str(skipped)))
    return title, rows
