"""Publishing memory where the agents load it (``memkiln publish``): the side effects.

1. find each agent's folder the way the agent does (environment overrides included), or the
   one line saying why the agent is skipped (not installed, memory turned off)
2. plan every file: what memkiln's text would be, what is on disk, and so whether it is
   created, changed, left as it is, or left alone (a file memkiln did not write, a link)
3. unless it is a dry run, write the files that change: atomically (a temporary sibling,
   flushed, renamed over), never through a symbolic link below the agent's folder, and
   mark the folders memkiln creates (``FOLDER_MARKER``)
4. ``--remove``: take memkiln's block out of the files it changed (their other bytes as they
   were), delete the files and folders it created, and leave anything edited since

The texts themselves are pure (``memkiln.transforms.publish``); this module only reads and
writes. A problem with one project's folder is one line; the other projects and targets go on.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memkiln.io.memory_files import TEMP_PREFIX, replace_atomically
from memkiln.transforms.publish import (
    CLAUDE_NAME_CHARS,
    CLAUDE_TOPIC,
    FOLDER_MARKER,
    FOLDER_MARKER_TEXT,
    TARGETS,
    BrokenBlockError,
    ProjectMemory,
    PublishSummary,
    Step,
    claude_block,
    claude_dirname,
    claude_topic,
    codex_block,
    codex_summary,
    is_absolute,
    omp_details,
    omp_dirname,
    omp_summary,
    outermost,
    owned,
    ownership,
    splice,
    unsplice,
)
from memkiln.transforms.redact import RuleSet

_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class AgentHome:
    """Where one agent keeps its memory: ``base`` is the agent's own folder (taken as it
    resolves: a linked dotfiles folder is fine), ``memories`` the folder below it holding the
    project folders (Claude Code: ``projects``) or the memory (Codex); nothing below ``base``
    may be a link. ``skip`` says why the target is not published to."""

    target: str
    base: Path | None = None
    memories: Path | None = None
    skip: str = ""


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home()).expanduser()


def _dir(env: Mapping[str, str], name: str, default: Path) -> Path:
    value = env.get(name)
    return Path(value).expanduser() if value else default


def claude_home(env: Mapping[str, str]) -> AgentHome:
    """Claude Code: ``$CLAUDE_CONFIG_DIR`` (default ``~/.claude``) ``/projects``; auto
    memory off with ``CLAUDE_CODE_DISABLE_AUTO_MEMORY`` or ``autoMemoryEnabled: false``."""
    config = _dir(env, "CLAUDE_CONFIG_DIR", _home(env) / ".claude")
    if not config.is_dir():
        return AgentHome("claude", skip=f"Claude Code is not installed here (no {config})")
    if env.get("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "").strip().lower() in _TRUE:
        return AgentHome("claude", skip="auto memory is off (CLAUDE_CODE_DISABLE_AUTO_MEMORY)")
    settings_file = config / "settings.json"
    try:
        settings = json.loads(settings_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        settings = {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return AgentHome("claude", skip=f"cannot read {settings_file} ({exc})")
    if not isinstance(settings, dict):
        settings = {}
    if settings.get("autoMemoryEnabled") is False:
        return AgentHome(
            "claude", skip=f"auto memory is off (autoMemoryEnabled in {settings_file})"
        )
    inner_env = settings.get("env")
    if isinstance(inner_env, dict) and (
        str(inner_env.get("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "")).strip().lower() in _TRUE
    ):
        return AgentHome("claude", skip=f"auto memory is off (env in {settings_file})")
    if settings.get("autoMemoryDirectory"):
        return AgentHome(
            "claude",
            skip=f"autoMemoryDirectory in {settings_file} moves its memory; memkiln does not "
            "publish there",
        )
    base = config.resolve()
    return AgentHome("claude", base, base / "projects")


def _yaml_setting(data: Any, dotted: str) -> Any:
    """A setting of Oh My Pi's config.yml, nested (``memory: {backend: …}``) or flat."""
    if not isinstance(data, dict):
        return None
    if dotted in data:
        return data[dotted]
    current: Any = data
    for part in dotted.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def omp_home(env: Mapping[str, str]) -> AgentHome:
    """Oh My Pi: ``<agentDir>/memories`` (``$PI_CODING_AGENT_DIR``, default
    ``~/${PI_CONFIG_DIR:-.omp}/agent``; for the default agent folder,
    ``$XDG_STATE_HOME/omp/memories`` when that exists); memory on when its config.yml sets
    ``memory.backend: local`` (or the older ``memories.enabled: true``)."""
    import yaml

    root = _home(env) / (env.get("PI_CONFIG_DIR") or ".omp")
    default = root / "agent"
    agent = _dir(env, "PI_CODING_AGENT_DIR", default)
    if not agent.is_dir():
        return AgentHome("omp", skip=f"Oh My Pi is not installed here (no {agent})")
    config: dict[str, Any] = {}
    shown = agent / "config.yml"
    for name in ("config.yml", "config.yaml"):
        path = agent / name
        if path.is_file():
            shown = path
            try:
                loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                return AgentHome("omp", skip=f"cannot read {path} ({type(exc).__name__})")
            config = loaded if isinstance(loaded, dict) else {}
            break
    backend = _yaml_setting(config, "memory.backend")
    legacy = _yaml_setting(config, "memories.enabled")
    if not (backend == "local" or (backend is None and legacy is True)):
        return AgentHome("omp", skip=f"its memory is off (memory.backend is not local in {shown})")
    memories = agent / "memories"
    if agent == default:
        state = _dir(env, "XDG_STATE_HOME", _home(env) / ".local" / "state") / "omp" / "memories"
        if state.is_dir():
            return AgentHome("omp", state.parent.resolve(), state.parent.resolve() / "memories")
    base = agent.resolve()
    return AgentHome("omp", base, base / memories.name)


def codex_home(env: Mapping[str, str]) -> AgentHome:
    """Codex: ``$CODEX_HOME/memories`` (default ``~/.codex``); memory on when its
    config.toml turns the ``memories`` feature on and does not set ``use_memories = false``."""
    home = _dir(env, "CODEX_HOME", _home(env) / ".codex")
    if not home.is_dir():
        return AgentHome("codex", skip=f"Codex is not installed here (no {home})")
    path = home / "config.toml"
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        config = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return AgentHome("codex", skip=f"cannot read {path} ({type(exc).__name__})")

    def feature_on(table: Any) -> bool:
        features = table.get("features") if isinstance(table, dict) else None
        if not isinstance(features, dict):
            return False
        return features.get("memories", features.get("memory_tool")) is True

    profiles = config.get("profiles")
    on = feature_on(config) or (
        isinstance(profiles, dict) and any(feature_on(p) for p in profiles.values())
    )
    memories_table = config.get("memories")
    if isinstance(memories_table, dict) and memories_table.get("use_memories") is False:
        on = False
    if not on:
        return AgentHome(
            "codex", skip=f"its memory is off (no 'memories = true' under [features] in {path})"
        )
    base = home.resolve()
    return AgentHome("codex", base, base / "memories")


HOMES: dict[str, Callable[[Mapping[str, str]], AgentHome]] = {
    "claude": claude_home,
    "omp": omp_home,
    "codex": codex_home,
}


# -- reading and writing ---------------------------------------------------------------------


class LinkError(OSError):
    """A path below an agent's folder is a symbolic link."""


def check_links(base: Path, path: Path) -> None:
    """Raise ``LinkError`` when ``path`` or a folder between ``base`` and it is a link."""
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        if current.is_symlink():
            raise LinkError(f"{current} is a symbolic link; not written through")


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def write_atomic(base: Path, path: Path, data: bytes) -> list[Path]:
    """Write ``data`` to ``path`` atomically, creating (and marking) missing folders below
    ``base``; returns the folders created."""
    check_links(base, path)
    created: list[Path] = []
    current = base
    for part in path.relative_to(base).parts[:-1]:
        current = current / part
        if not current.exists():
            current.mkdir()
            (current / FOLDER_MARKER).write_text(FOLDER_MARKER_TEXT, encoding="utf-8")
            created.append(current)
    check_links(base, path)
    replace_atomically(path, data)
    return created


def remove_folder_markers(base: Path, folder: Path) -> list[Path]:
    """Remove the folders memkiln created from ``folder`` up to ``base``, when nothing but
    memkiln's marker is left in them; returns those removed."""
    removed = []
    current = folder
    while current != base and base in current.parents:
        marker = current / FOLDER_MARKER
        if current.is_symlink() or not marker.is_file():
            break
        if any(entry.name != FOLDER_MARKER for entry in current.iterdir()):
            break
        marker.unlink()
        current.rmdir()
        removed.append(current)
        current = current.parent
    return removed


# -- planning ---------------------------------------------------------------------------------


@dataclass
class Change:
    """One planned write (``data``) or removal (``data`` None) of a file."""

    step: Step
    base: Path
    path: Path
    data: bytes | None


@dataclass(frozen=True)
class Project:
    """A project to publish: its memory and the directories its sessions ran in."""

    memory: ProjectMemory
    cwds: tuple[str, ...]


def git_root(cwd: str) -> str:
    """The repository root Claude Code scopes memory to, for a directory on this machine
    (the main checkout for a worktree); the directory itself when it is not here or not in a
    repository."""
    path = Path(cwd)
    if not path.is_absolute() or not path.is_dir():
        return cwd
    for folder in (path, *path.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return str(folder)
        if dot_git.is_file():
            try:
                text = dot_git.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return str(folder)
            if not text.startswith("gitdir:"):
                return str(folder)
            gitdir = (folder / text.removeprefix("gitdir:").strip()).resolve()
            commondir = gitdir / "commondir"
            if commondir.is_file():
                common = (gitdir / commondir.read_text(encoding="utf-8").strip()).resolve()
                if common.name == ".git":
                    return str(common.parent)
            return str(folder)
    return cwd


def unreadable(path: Path, exc: OSError) -> str:
    """The line for a file memkiln cannot read (a folder in its place, no permission)."""
    return f"cannot read {path} ({exc.strerror or exc}); left alone"


def _usable(cwd: str) -> bool:
    return is_absolute(cwd) and "[REDACTED_SECRET]" not in cwd


class Planner:
    """Works out every change of one publish (or removal) before anything is written."""

    def __init__(self, rules: RuleSet, summary: PublishSummary) -> None:
        self.rules = rules
        self.summary = summary
        self.changes: list[Change] = []

    def say(self, target: str, line: str) -> None:
        self.summary.lines.append(f"{target}: {line}")

    def _file(
        self, home: AgentHome, path: Path, data: bytes, *, project: str | None, kind: str
    ) -> None:
        assert home.base is not None
        before = read_bytes(path)
        action = "create" if before is None else ("keep" if before == data else "change")
        step = Step(home.target, str(path), action, len(data), project, kind)
        self.summary.steps.append(step)
        if action != "keep":
            self.changes.append(Change(step, home.base, path, data))

    def _skip(
        self, home: AgentHome, path: Path, reason: str, *, project: str | None, kind: str = "file"
    ) -> None:
        self.summary.steps.append(Step(home.target, str(path), "skip", 0, project, kind, reason))
        self.say(home.target, reason)

    def _text(self, path: Path) -> str | None:
        data = read_bytes(path)
        return None if data is None else data.decode("utf-8")

    def _linked(self, home: AgentHome, path: Path, project: str | None) -> bool:
        assert home.base is not None
        try:
            check_links(home.base, path)
        except LinkError as exc:
            self._skip(home, path, str(exc), project=project)
            return True
        return False

    def _owned_file(self, home: AgentHome, path: Path, body: str, *, project: str | None) -> None:
        """A file memkiln owns: written unless it is someone else's or was edited since."""
        if self._linked(home, path, project):
            return
        try:
            before = self._text(path)
        except UnicodeDecodeError:
            self._skip(home, path, f"{path} is not UTF-8 text memkiln wrote; left alone",
                       project=project)  # fmt: skip
            return
        except OSError as exc:
            self._skip(home, path, unreadable(path, exc), project=project)
            return
        if before is not None:
            state = ownership(before)
            if state == "foreign":
                self._skip(home, path, f"{path} was not written by memkiln; left alone",
                           project=project)  # fmt: skip
                return
            if state == "edited":
                self._skip(home, path, f"{path} was edited since memkiln wrote it; left alone",
                           project=project)  # fmt: skip
                return
        self._file(home, path, owned(body).encode("utf-8"), project=project, kind="file")

    # Claude Code ----------------------------------------------------------------------

    def claude(self, home: AgentHome, projects: Sequence[Project]) -> None:
        assert home.memories is not None
        for project in projects:
            roots = outermost(git_root(c) for c in project.cwds if _usable(c))
            for root in roots:
                name = self._claude_name(home, root)
                if name is None:
                    continue
                self.claude_folder(home, home.memories / name / "memory", project.memory)

    def _claude_name(self, home: AgentHome, root: str) -> str | None:
        assert home.memories is not None
        name = claude_dirname(root)
        if len(name) <= CLAUDE_NAME_CHARS:
            return name
        prefix = name[:CLAUDE_NAME_CHARS] + "-"
        found = (
            sorted(p.name for p in home.memories.iterdir() if p.name.startswith(prefix))
            if home.memories.is_dir()
            else []
        )
        if len(found) == 1:
            return found[0]
        self.say("claude", f"the folder name of {root} is over {CLAUDE_NAME_CHARS} characters "
                 "and Claude Code has not made it yet; skipped")  # fmt: skip
        return None

    def claude_folder(self, home: AgentHome, folder: Path, memory: ProjectMemory) -> None:
        index = folder / "MEMORY.md"
        if self._linked(home, index, memory.key):
            return
        try:
            before = self._text(index)
            rest = unsplice(before)[0] if before is not None else ""
        except UnicodeDecodeError:
            self._skip(home, index, f"{index} is not UTF-8; left alone", project=memory.key,
                       kind="block")  # fmt: skip
            return
        except OSError as exc:
            self._skip(home, index, unreadable(index, exc), project=memory.key, kind="block")
            return
        except BrokenBlockError:
            self._skip(home, index, f"{index} has memkiln's begin line without its end line; "
                       "left alone (remove the begin line to let memkiln write it again)",
                       project=memory.key, kind="block")  # fmt: skip
            return
        block = claude_block(memory, rest=rest, rules=self.rules)
        if block is None:
            self._skip(home, index, f"{index} is already at what Claude Code loads (200 lines "
                       "or 25 KB); memkiln's block not added", project=memory.key,
                       kind="block")  # fmt: skip
        else:
            text = splice(before, block)
            self._file(home, index, text.encode("utf-8"), project=memory.key, kind="block")
        topic = claude_topic(memory, rules=self.rules)
        self._owned_file(home, folder / CLAUDE_TOPIC, topic, project=memory.key)

    # Oh My Pi ----------------------------------------------------------------------------

    def omp(self, home: AgentHome, projects: Sequence[Project]) -> None:
        assert home.memories is not None
        for project in projects:
            for cwd in sorted({c for c in project.cwds if _usable(c)}):
                folder = home.memories / omp_dirname(cwd)
                memory = project.memory
                if self._omp_own_memory(home, folder, memory.key):
                    continue
                summary = omp_summary(memory, rules=self.rules)
                self._owned_file(home, folder / "memory_summary.md", summary, project=memory.key)
                details = omp_details(memory, rules=self.rules)
                self._owned_file(home, folder / "MEMORY.md", details, project=memory.key)

    def _omp_own_memory(self, home: AgentHome, folder: Path, project: str) -> bool:
        """True (and one line) when Oh My Pi's own memory is in the folder: memkiln adds
        nothing beside it."""
        for name in ("memory_summary.md", "MEMORY.md"):
            path = folder / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                state = ownership(path.read_bytes().decode("utf-8"))
            except (OSError, UnicodeDecodeError):
                state = "foreign"
            if state == "foreign":
                self._skip(home, folder, f"{folder} holds Oh My Pi's own memory ({name}); "
                           "left alone", project=project)  # fmt: skip
                return True
        return False

    # Codex ---------------------------------------------------------------------------------

    def codex(
        self,
        home: AgentHome,
        memories: Sequence[ProjectMemory],
        *,
        index: str,
        alongside: bool,
    ) -> None:
        assert home.memories is not None and home.base is not None
        folder = home.memories
        path = folder / "memory_summary.md"
        if self._linked(home, path, None):
            return
        theirs = self._codex_own_files(folder)
        if theirs and not alongside:
            self.summary.skipped_targets["codex"] = "Codex's own memory"
            self.say("codex", f"{folder} holds Codex's own memory ({len(theirs)} files memkiln "
                     "did not write); left alone (--codex-alongside adds memkiln's summary to "
                     "it)")  # fmt: skip
            return
        try:
            before = self._text(path)
        except UnicodeDecodeError:
            self._skip(home, path, f"{path} is not UTF-8; left alone", project=None)
            return
        except OSError as exc:
            self._skip(home, path, unreadable(path, exc), project=None)
            return
        state = ownership(before) if before is not None else "missing"
        if state == "edited":
            self._skip(home, path, f"{path} was edited since memkiln wrote it; left alone",
                       project=None)  # fmt: skip
            return
        if state == "foreign" and before is not None:  # alongside: a block in Codex's file
            try:
                block = codex_block(memories, existing=before, index=index, rules=self.rules)
            except BrokenBlockError:
                self._skip(home, path, f"{path} has memkiln's begin line without its end "
                           "line; left alone", project=None, kind="block")  # fmt: skip
                return
            text = splice(before, block)
            self._file(home, path, text.encode("utf-8"), project=None, kind="block")
            return
        text = codex_summary(memories, index=index, rules=self.rules)
        self._file(home, path, owned(text).encode("utf-8"), project=None, kind="file")

    def _codex_own_files(self, folder: Path) -> list[str]:
        """Entries of Codex's memory folder memkiln did not write."""
        if not folder.is_dir():
            return []
        theirs = []
        for entry in sorted(folder.iterdir()):
            if entry.name in (FOLDER_MARKER,) or entry.name.startswith(TEMP_PREFIX):
                continue
            if entry.name == "memory_summary.md" and entry.is_file() and not entry.is_symlink():
                try:
                    if ownership(entry.read_bytes().decode("utf-8")) != "foreign":
                        continue
                except UnicodeDecodeError:
                    pass
            theirs.append(entry.name)
        return theirs

    # removal ---------------------------------------------------------------------------------

    def remove(self, home: AgentHome, folders: Iterator[Path]) -> None:
        """Plan the removal of memkiln's work in each folder (MEMORY.md's block, the files
        memkiln owns)."""
        assert home.base is not None
        for folder in folders:
            if self._linked(home, folder, None):
                continue
            if not folder.is_dir():
                continue
            for entry in sorted(folder.iterdir()):
                if entry.is_symlink() or not entry.is_file() or not entry.name.endswith(".md"):
                    continue
                self._remove_file(home, entry)
            self.summary.steps.append(Step(home.target, str(folder), "remove", kind="folder"))
            self.changes.append(Change(self.summary.steps[-1], home.base, folder, None))

    def _remove_file(self, home: AgentHome, path: Path) -> None:
        assert home.base is not None
        try:
            text = path.read_bytes().decode("utf-8")  # line ends as they are
        except UnicodeDecodeError:
            return
        state = ownership(text)
        if state == "owned":
            step = Step(home.target, str(path), "remove", 0)
            self.summary.steps.append(step)
            self.changes.append(Change(step, home.base, path, None))
            return
        if state == "edited":
            self._skip(home, path, f"{path} was edited since memkiln wrote it; left alone",
                       project=None)  # fmt: skip
            return
        try:
            rest, created = unsplice(text)
        except BrokenBlockError:
            self._skip(home, path, f"{path} has memkiln's begin line without its end line; "
                       "left alone", project=None, kind="block")  # fmt: skip
            return
        if rest == text:
            return  # nothing of memkiln's in it
        step = Step(home.target, str(path), "change", len(rest.encode("utf-8")), kind="block")
        if created and not rest.strip():
            step = Step(home.target, str(path), "remove", 0, kind="block")
            self.summary.steps.append(step)
            self.changes.append(Change(step, home.base, path, None))
            return
        self.summary.steps.append(step)
        self.changes.append(Change(step, home.base, path, rest.encode("utf-8")))


def folders_to_clean(home: AgentHome, only: Sequence[Project] | None) -> Iterator[Path]:
    """The folders ``--remove`` looks in: every project folder of the agent (or those of
    ``only``'s projects)."""
    assert home.memories is not None
    if home.target == "codex":
        yield home.memories
        return
    if only is not None:
        names: set[str] = set()
        for project in only:
            cwds = [c for c in project.cwds if _usable(c)]
            if home.target == "claude":
                names |= {claude_dirname(r) for r in outermost(git_root(c) for c in cwds)}
            else:
                names |= {omp_dirname(c) for c in cwds}
        candidates = [home.memories / n for n in sorted(names)]
    elif home.memories.is_dir() and not home.memories.is_symlink():
        candidates = sorted(p for p in home.memories.iterdir() if p.is_dir())
    else:
        candidates = []
    for folder in candidates:
        yield folder / "memory" if home.target == "claude" else folder


def apply(changes: Sequence[Change]) -> list[str]:
    """Carry out the planned changes; returns a line per change that failed (the others
    are still made)."""
    problems: list[str] = []
    for change in changes:
        try:
            if change.step.kind == "folder":
                removed = remove_folder_markers(change.base, change.path)
                if not removed:
                    change.step.action = "keep"
                continue
            if change.data is None:
                check_links(change.base, change.path)
                change.path.unlink(missing_ok=True)
                remove_folder_markers(change.base, change.path.parent)
                continue
            write_atomic(change.base, change.path, change.data)
        except OSError as exc:
            change.step.action = "skip"
            change.step.reason = (
                str(exc)
                if isinstance(exc, LinkError)
                else (f"cannot write {change.path}: {exc.strerror or exc}")
            )
            problems.append(f"{change.step.target}: {change.step.reason}")
    return problems


def publish_targets(
    targets: Sequence[str],
    projects: Sequence[Project],
    *,
    rules: RuleSet,
    index: str,
    every: Sequence[Project] | None = None,
    only_these: bool = False,
    env: Mapping[str, str] | None = None,
    dry_run: bool = False,
    remove: bool = False,
    alongside: bool = False,
    summary: PublishSummary | None = None,
) -> PublishSummary:
    """Publish (or with ``remove``, take back) memory to each target: ``projects`` to Claude
    Code and Oh My Pi, ``every`` project (default: ``projects``) to Codex's global summary.
    ``only_these``: ``projects`` were named (``--project``), so ``remove`` looks in their
    folders only."""
    env = os.environ if env is None else env
    summary = summary or PublishSummary()
    summary.dry_run, summary.remove = dry_run, remove
    for target in TARGETS:
        if target not in targets:
            continue
        home = HOMES[target](env)
        if home.skip:
            summary.skipped_targets[target] = home.skip
            summary.lines.append(f"{target}: skipped: {home.skip}")
            continue
        planner = Planner(rules, summary)
        if remove and only_these and target == "codex":
            summary.lines.append(
                "codex: its one summary covers every project; --remove with --project leaves it"
            )
            continue
        if remove:
            planner.remove(home, folders_to_clean(home, projects if only_these else None))
        elif target == "claude":
            planner.claude(home, projects)
        elif target == "omp":
            planner.omp(home, projects)
        else:
            memories = [p.memory for p in (projects if every is None else every)]
            planner.codex(home, memories, index=index, alongside=alongside)
        if not dry_run:
            summary.lines.extend(apply(planner.changes))
    # folders: listed only when removed
    summary.steps = [s for s in summary.steps if s.kind != "folder" or s.action == "remove"]
    if dry_run:
        summary.steps = [s for s in summary.steps if s.kind != "folder"]
    return summary
