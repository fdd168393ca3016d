"""The offline, deterministic stage-one extractor.

It reads the same kept, redacted items a model would (``filter_memory_items``' output: no
injected context, wrappers cut to the user's words), and fills the same three fields in the
same formats from evidence in the session:

- the session's segments (``memkiln.transforms.segments``), each one task: its title is the
  segment's first request (the session's first genuine request for task 1), later requests
  are its follow-ups;
- preferences, decisions, commitments and facts: sentences the user wrote, recognized from
  their phrasing (never a question, an insult or a list marker);
- failed tool calls with their error lines (the lessons), and whether a later call worked;
- the commands that worked and the files that changed;
- the final answer, and an outcome per task (success / partial / fail / uncertain) from
  signals: the user's feedback, tests or builds passing after failing, exit codes, the agent's
  final answer; ``uncertain`` only when there is none.

A session with nothing durable gets the no-op answer. Evidence is pulled out with Polars
expressions over the items; only the few resulting strings are formatted in Python.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from memkiln.transforms.raw_memory import RawMemory, RawTask, write_raw_memory
from memkiln.transforms.segments import GAP_MINUTES, MAX_TURNS, TOPIC_SWITCH, assign_segments
from memkiln.transforms.stage_one_answer import NOOP, StageOneOutput
from memkiln.transforms.text import one_line

SHELL_TOOLS = ("shell", "shell_command", "exec_command", "bash", "Bash", "local_shell", "run")
EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit", "edit", "write", "str_replace_editor")

#: A user sentence that states a preference or standing instruction.
PREFERENCE = (
    r"(?i)(?:\b(?:always|never|please (?:use|keep|avoid|don't|do not|make)|i (?:prefer|like|"
    r"would rather|'d rather)|make sure|avoid|instead of|rather than|(?:you|we) must|"
    r"must (?:not|never|always)|(?:you|we) (?:should not|shouldn't|don't|do not))\b"
    r"|^(?:please,? )?(?:don't|do not)\b)"  # "don't" as an instruction, not a report
)
#: A sentence that asks rather than states (a question mark is not always typed).
QUESTION = (
    r"(?i)(?:\?\s*$|^(?:can|could|would|will|do|does|did|is|are|was|were|should|why|how|what|"
    r"when|where|which|who|have|has)\b)"
)
#: Words that make a sentence an outburst rather than a standing instruction.
INSULT = (
    r"(?i)\b(?:stupid|idiot\w*|dumb|moron\w*|useless|wtf|fuck\w*|shit\w*|crap|damn\w*|"
    r"garbage|incompetent|lazy|retard\w*|bullshit|dammit|hell)\b"
)
#: A list marker or quote marker in front of a sentence (``- ``, ``* ``, ``1. ``, ``> ``).
LIST_MARKER = r"^(?:[-*+•>]\s+|\d{1,3}[.)]\s+|#{1,6}\s+)+"
#: A user sentence that records a decision or a commitment.
DECISION = (
    r"(?i)\b(?:let's|let us|we (?:will|decided|agreed|should|need to|are going to)|go with|"
    r"switch to|use [\w.\-]+ instead|from now on|going forward|todo|follow[- ]up|remember)\b"
)
#: A user sentence that states a fact about the project or environment.
FACT = (
    r"(?i)\b(?:we use|our [\w\- ]{1,30} (?:is|are|uses|runs)|is located|lives in|runs on|"
    r"is deployed|requires|depends on|note that|fyi|the (?:api|db|database|server|repo|app) "
    r"(?:is|uses|runs))\b"
)
SUCCESS_FEEDBACK = (
    r"(?i)\b(?:thanks|thank you|works|worked|working now|perfect|great|looks good|lgtm|nice|"
    r"awesome|excellent|that did it|fixed|good job|solved|resolved|all good|ship it|merged|"
    r"it's working|that's it|exactly|well done|cool|love it)\b"
)
FAIL_FEEDBACK = (
    r"(?i)\b(?:doesn't work|does not work|didn't work|did not work|not working|"
    r"still (?:broken|failing|fails|wrong|not|the same|getting|seeing|doesn't|does not)|"
    r"wrong|revert|undo|roll ?back|broke|broken|failed|worse|no,? that|same error|not fixed|"
    r"(?:i|we) (?:get|got|see|am getting|'m getting) (?:an? |the |this )?(?:error|exception))\b"
)
#: A shell command that runs tests, a build, a type check or a linter.
TEST_OR_BUILD = (
    r"(?i)(?:^|[\s;&|(/])(?:pytest|py\.test|tox|nox|jest|vitest|mocha|playwright test|"
    r"(?:npm|pnpm|yarn|bun)(?: run)? (?:test|build|lint|check|typecheck|type-check)\b|"
    r"cargo (?:test|build|check|clippy|nextest)|go (?:test|build|vet)|make\b|cmake --build|ctest|"
    r"mvn|gradle|gradlew|dotnet (?:test|build)|tsc\b|ruff|mypy|pyright|eslint|phpunit|rspec|"
    r"rake test|swift (?:test|build)|xcodebuild|python3? -m (?:pytest|unittest)|unittest|"
    r"(?:mise|just|task|uv|poetry|hatch|pdm|deno|composer) (?:run )?(?:test|lint|build|check|ci)\b)"
)
#: The agent's final answer reports a completed task, or one it could not complete.
DONE_CLAIM = (
    r"(?i)^(?:committed|pushed|merged|deployed|added|updated|created|fixed|implemented|removed|"
    r"renamed|moved|wrote|refactored|replaced|installed|upgraded)\b|"
    r"\b(?:all (?:\d+ )?tests? pass|tests? (?:now )?pass|(?:build|lint|check)s? (?:now )?pass|"
    r"passes|passing|is now|now works|now working|works now|fixed|implemented|i(?:'ve| have) "
    r"(?:added|updated|created|implemented|fixed|changed|removed|made|written|refactored)|"
    r"(?:done|completed?)\b)"
)
NOT_DONE_CLAIM = (
    r"(?i)\b(?:could not|couldn't|unable to|was not able|wasn't able|cannot|can't|still fail\w*|"
    r"not (?:yet )?(?:fixed|working|resolved)|blocked|did not manage|didn't manage|"
    r"(?:tests?|build) (?:still )?fail\w*)\b"
)
#: Commands worth remembering as "worked": not a plain look around the tree.
TRIVIAL_COMMAND = (
    r"^(?:cd [^&;]+&& ?)?(?:ls|cat|sed -n|head|tail|rg|grep|find|pwd|echo|wc|git (?:status|diff|"
    r"log|show|branch)|nl|tree|which|type|date|Get-Content|Get-ChildItem|dir|applypatch|"
    r"apply_patch)\b|--version$|<<|\n"
)
ERROR_LINE = (
    r"(?im)^.*(?:error|exception|traceback|failed|failure|fatal|not found|no such file|"
    r"permission denied|cannot|can't|denied|refused|timed out|panic).*$"
)
EXIT_FAILURE = (
    r"(?:Exit code: [1-9]\d*|\"exit_code\":\s*[1-9]\d*|exited with (?:code|status) [1-9]\d*|"
    r"Process exited with code [1-9]\d*|\"is_error\":\s*true)"
)
#: An output that states a zero exit.
EXIT_OK = (
    r"(?:Exit code: 0\b|\"exit_code\":\s*0\b|exited with (?:code|status) 0\b|"
    r"Process exited with code 0\b)"
)
PATCH_FILE = r"\*\*\* (?:Update|Add|Delete) File: ([^\n\\]+)"

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "from",
        "with",
        "by",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "this",
        "that",
        "these",
        "those",
        "i",
        "you",
        "we",
        "they",
        "he",
        "she",
        "me",
        "my",
        "our",
        "your",
        "their",
        "please",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "do",
        "does",
        "did",
        "done",
        "not",
        "no",
        "yes",
        "so",
        "just",
        "also",
        "into",
        "out",
        "up",
        "about",
        "what",
        "which",
        "who",
        "how",
        "why",
        "when",
        "where",
        "there",
        "here",
        "all",
        "any",
        "some",
        "more",
        "most",
        "very",
        "too",
        "now",
        "let",
        "lets",
        "make",
        "use",
        "using",
        "get",
        "got",
        "need",
        "want",
        "like",
        "see",
        "look",
        "file",
        "files",
        "code",
        "add",
        "fix",
        "run",
    ]
)


@dataclass(frozen=True)
class RolloutFacts:
    """What the formatter needs to know about the session besides its items."""

    rollout_id: str
    cwd: str | None
    updated_at: datetime | None


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _sentences(texts: list[str], pattern: str, limit: int) -> list[str]:
    """Sentences of the user's messages that match ``pattern``, whole and as written (a
    list or quote marker in front removed), that state rather than ask or insult."""
    if not texts:
        return []
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String}).select(
        pl.col("t").str.replace_all(r"([.!?])\s+", "${1}\n").str.split("\n").explode()
    )
    hits = (
        frame.select(pl.col("t").str.strip_chars().str.replace(LIST_MARKER, "").str.strip_chars())
        .filter(
            pl.col("t").str.contains(pattern)
            & (pl.col("t").str.len_chars().is_between(12, 300))
            & (pl.col("t").str.count_matches(r"\S+") >= 3)
            & pl.col("t").str.contains(r"^[\p{L}\"'(]")  # words, not code or markup
            & ~pl.col("t").str.contains(QUESTION)
            & ~pl.col("t").str.contains(INSULT)
            & ~pl.col("t").str.contains(r"[{};]\s*$|[`]{3}")
        )
        .unique(maintain_order=True)
        .head(limit)
    )
    return [" ".join(t.split()) for t in hits["t"].to_list()]


def _calls(items: pl.DataFrame) -> pl.DataFrame:
    """Tool calls with their command (if a shell), their output, and whether they failed."""
    calls = items.filter(
        pl.col("item_type").is_in(["function_call", "custom_tool_call", "local_shell_call"])
    ).select("seq", "segment_index", "name", "call_id", args="text")
    outputs = items.filter(
        pl.col("item_type").is_in(["function_call_output", "custom_tool_call_output"])
    ).select("call_id", output="text")
    command_json = pl.coalesce(
        pl.col("args").str.json_path_match("$.command"),
        pl.col("args").str.json_path_match("$.cmd"),
    )
    # ["bash", "-lc", "script"] -> script; ["git", "status"] -> git status
    as_list = (
        command_json.str.replace(r'^\[\s*"(?:bash|zsh|sh)"\s*,\s*"-[a-z]*c"\s*,\s*', "[")
        .str.strip_prefix("[")
        .str.strip_suffix("]")
        .str.replace_all(r'"\s*,\s*"', " ")
        .str.strip_chars('"')
        .str.replace_all(r'\\"', '"')
        .str.replace_all(r"\\n", "\n")
    )
    command = pl.when(command_json.str.starts_with("[")).then(as_list).otherwise(command_json)
    return (
        calls.join(outputs, on="call_id", how="left")
        .with_columns(
            command=pl.when(pl.col("name").is_in(SHELL_TOOLS) | command_json.is_not_null())
            .then(command.str.replace(r"^(?:bash|zsh|sh) -[a-z]*c ", ""))
            .otherwise(None),
            failed=pl.col("output").str.contains(EXIT_FAILURE).fill_null(False)
            & ~(  # a search that finds nothing exits 1: not a failure
                command.str.contains(r"^(?:cd [^&;]+&& ?)?(?:rg|grep|egrep|diff|test|\[) ")
                & pl.col("output").str.contains(
                    r"(?:Exit code: 1\b|exited with code 1\b|\"exit_code\":\s*1\b)"
                )
            ).fill_null(False),
            # an older Codex output is JSON ({"output": "...", "metadata": ...}): its text
            error_line=pl.coalesce(pl.col("output").str.json_path_match("$.output"), "output")
            .str.extract(f"({ERROR_LINE})", 1)
            .str.strip_chars(),
        )
        .with_columns(  # a check is the command itself, not a script that mentions one
            is_check=pl.col("command").str.split("\n").list.first().str.contains(TEST_OR_BUILD)
            & ~pl.col("command").str.contains("<<")
        )
        .with_columns(pl.col("is_check").fill_null(False))
        .sort("seq")
    )


def _files_changed(items: pl.DataFrame) -> list[str]:
    calls = items.filter(pl.col("item_type").is_in(["function_call", "custom_tool_call"]))
    patched = calls.select(pl.col("text").str.extract_all(PATCH_FILE).alias("f")).explode("f")
    patched = patched.select(pl.col("f").str.replace(r"^\*\*\* (?:Update|Add|Delete) File: ", ""))
    edited = calls.filter(pl.col("name").is_in(EDIT_TOOLS)).select(
        f=pl.coalesce(
            pl.col("text").str.json_path_match("$.file_path"),
            pl.col("text").str.json_path_match("$.path"),
        )
    )
    files = pl.concat([patched, edited]).drop_nulls().unique(maintain_order=True)
    return [f.strip() for f in files["f"].to_list() if f.strip()][:30]


#: Words two commands may share without being about the same thing.
_GENERIC_WORDS = frozenset(
    {"run", "exec", "cd", "sudo", "npx", "env", "bash", "sh", "and", "true", "false", "null"}
    | {"silentlycontinue", "continue", "stop", "ignore"}  # PowerShell -ErrorAction values
)


def _command_words(command: str) -> list[str]:
    """The program and its non-flag arguments, in order (lower case, paths cut to their last
    part), after a leading ``cd DIR &&``."""
    command = re.sub(r"^cd [^&;]+&& ?", "", command.strip())
    words = []
    for token in command.split():
        flag_or_redirect = token.startswith("-") or re.match(r"\d*[<>|&;]", token)
        if flag_or_redirect or not re.search("[A-Za-z]", token):
            continue  # flags, redirections, pipes, numbers
        word = token.strip("'\"`").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
        if len(word) >= 3 and word not in _GENERIC_WORDS:
            words.append(word)
    return words


def _related(failed: str, later: str) -> bool:
    """Whether a later command can be the fix of a failed one: the same program with the
    same first argument (``npm run check`` again), or a shared argument (``npm test`` then
    ``pnpm test``); not merely the same program (``git push`` then ``git checkout``)."""
    a, b = _command_words(failed), _command_words(later)
    if not a or not b:
        return False
    if a[0] == b[0] and a[1:2] == b[1:2]:
        return True
    return bool(set(a[1:]) & set(b[1:]))


def _opening(text: str) -> str:
    """The first sentence of a message (at most 160 characters): where feedback is, while
    the rest of a long follow-up is usually the next task."""
    first = text.strip().split("\n", 1)[0]
    return re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0][:160]


def _outcome(
    feedback: list[str], calls: pl.DataFrame, answer: str, files: list[str]
) -> tuple[str, str]:
    """A task's outcome and why, from the strongest signal there is: the user's feedback
    (latest first), then tests or builds, then the agent's final answer, then exit codes."""
    for text in reversed(feedback):
        text = _opening(text)
        if re.search(FAIL_FEEDBACK, text):
            return "fail", f'the user said: "{_clip(text, 100)}"'
        if re.search(SUCCESS_FEEDBACK, text):
            return "success", f'the user said: "{_clip(text, 100)}"'
    checks = calls.filter("is_check")
    if checks.height:
        last = checks.row(-1, named=True)
        shown = _clip(last["command"], 60)
        if last["failed"]:
            return "partial", f"the last check, `{shown}`, failed"
        if checks["failed"].any():
            return "success", f"`{shown}` passed after failing"
        return "success", f"`{shown}` passed"
    final = _opening(answer) + " " + answer[-300:] if answer else ""
    if final and re.search(NOT_DONE_CLAIM, final):
        return "partial", f'the agent said: "{_clip(_claim(answer, NOT_DONE_CLAIM), 100)}"'
    failures_at_end = bool(calls.height and calls["failed"].to_list()[-1])
    if failures_at_end:
        return "partial", "the last tool calls failed and the user gave no feedback"
    if final and re.search(DONE_CLAIM, final):
        return "success", f'the agent reported: "{_clip(_claim(answer, DONE_CLAIM), 100)}"'
    commands = calls.filter(pl.col("command").is_not_null())
    if answer and commands.height:
        output = commands["output"].fill_null("")[-1]
        if re.search(EXIT_OK, output):
            return "success", "the last command exited 0 and the agent answered"
        stated = re.search(r"(?i)exit code|exit_code|exited with", output)
        if not stated and not re.search(ERROR_LINE, output):  # Claude Code, Pi: no exit code
            return "success", "the last command ran without an error and the agent answered"
    return "uncertain", "no feedback, check or tool call to judge by"


def _claim(answer: str, pattern: str) -> str:
    """The sentence of ``answer`` that holds the claim."""
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", answer):
        if re.search(pattern, sentence):
            return sentence.strip(" -*#")
    return _opening(answer)


def _keywords(texts: list[str], files: list[str]) -> list[str]:
    words = Counter(
        w
        for t in texts
        for w in re.findall(r"[A-Za-z][A-Za-z0-9_\-]{2,}", t.lower())
        if w not in STOP_WORDS
    )
    names = [f.rsplit("/", 1)[-1] for f in files[:4]]
    return list(dict.fromkeys([w for w, _ in words.most_common(8)] + names))[:12]


def slug_for(text: str) -> str | None:
    plain = re.sub(r"['’]", "", text.lower())
    words = [w for w in re.findall(r"[a-z0-9]+", plain) if w not in STOP_WORDS]
    return "-".join(words[:5]) or None


def _substantive(text: str) -> bool:
    """A request rather than a greeting or a go-ahead ("hello", "continue", "하이"): three
    words or more, or six characters of a script written without spaces."""
    return len(text.split()) >= 3 or (len(text.strip()) >= 6 and not text.isascii())


def _title_line(request: str) -> str:
    """The request's first substantive line, without heading, list or quote markers."""
    lines = [re.sub(LIST_MARKER, "", line.strip()).strip() for line in request.splitlines()]
    lines = [line for line in lines if line]
    return next((line for line in lines if _substantive(line)), lines[0] if lines else request)


@dataclass(frozen=True)
class Task:
    """One segment of the session, as a task of the memory."""

    title: str
    requests: list[str]
    feedback: list[str]
    preferences: list[str]
    knowledge: list[str]
    failures: list[str]
    commands: list[str]
    files: list[str]
    outcome: str
    why: str


def _worked(calls: pl.DataFrame) -> list[str]:
    """Commands that succeeded and are worth repeating, checks first."""
    ok = calls.filter(
        pl.col("command").is_not_null()
        & ~pl.col("failed")
        & ~pl.col("command").str.contains(TRIVIAL_COMMAND)
        & (pl.col("command").str.len_chars() <= 120)
    ).sort("is_check", "seq", descending=[True, False])
    return list(dict.fromkeys(_clip(c, 120) for c in ok["command"].to_list()))[:6]


def _failures(calls: pl.DataFrame) -> list[str]:
    out: list[str] = []
    for row in calls.filter("failed").head(8).iter_rows(named=True):
        what = row["command"] or row["name"] or "a tool call"
        line = row["error_line"] or "non-zero exit"
        fix = ""
        if row["command"]:
            later_ok = calls.filter(
                (pl.col("seq") > row["seq"]) & ~pl.col("failed") & (pl.col("name") == row["name"])
            )["command"].drop_nulls()
            related = [c for c in later_ok if _related(row["command"], c)]
            fix = f"; a later `{_clip(related[0], 80)}` succeeded" if related else ""
        out.append(f"`{_clip(what, 100)}` failed: {_clip(line, 160)}{fix}")
    return out


def _tasks(items: pl.DataFrame, calls: pl.DataFrame) -> list[Task]:
    """One task per segment that holds work (tool calls, an answer or the user's statements);
    the next segment's opening counts as feedback on the one before."""
    requests = items.filter(pl.col("request").is_not_null())
    segments = requests["segment_index"].unique().sort().to_list()
    seen_prefs: set[str] = set()
    out: list[Task] = []
    for n, index in enumerate(segments):
        mine = items.filter(pl.col("segment_index") == index)
        asked = requests.filter(pl.col("segment_index") == index)["request"].to_list()
        nxt = segments[n + 1] if n + 1 < len(segments) else None
        following = (
            requests.filter(pl.col("segment_index") == nxt)["request"].head(1).to_list()
            if nxt is not None
            else []
        )
        # the next task's opening is feedback on this one ("works. Now ..."), unless it is
        # the switch itself ("Now let's fix the broken header" says nothing of this task)
        following = [f for f in following if not re.search(TOPIC_SWITCH, _opening(f))]
        seg_calls = calls.filter(pl.col("segment_index") == index)
        answers = mine.filter((pl.col("item_type") == "message") & (pl.col("role") == "assistant"))
        answer = (answers["text"].drop_nulls().to_list() or [""])[-1]
        files = _files_changed(mine)
        prefs = [p for p in _sentences(asked, PREFERENCE, 8) if p not in seen_prefs]
        seen_prefs.update(prefs)
        decisions = _sentences(asked, DECISION, 6)
        facts = _sentences(asked, FACT, 6)
        failures = _failures(seg_calls)
        worked = _worked(seg_calls)
        if not (seg_calls.height or answer or prefs or decisions or facts):
            continue  # a request nobody acted on: nothing to remember
        outcome, why = _outcome(asked[1:] + following, seg_calls, answer, files)
        knowledge = [f"Decision: {d}" for d in decisions] + [f"Fact: {f}" for f in facts]
        if worked:
            knowledge.append("Commands that worked: " + ", ".join(f"`{c}`" for c in worked))
        if files:
            knowledge.append("Files changed: " + ", ".join(_clip(f, 200) for f in files[:12]))
        if answer:
            knowledge.append("Final answer: " + _clip(answer, 400))
        first = next((r for r in asked if _substantive(r)), asked[0])
        commands = [_clip(c, 120) for c in seg_calls["command"].drop_nulls().to_list()]
        out.append(
            Task(
                title=_clip(_title_line(first), 80),
                requests=asked,
                feedback=following,
                preferences=prefs,
                knowledge=knowledge,
                failures=failures,
                commands=commands,
                files=files,
                outcome=outcome,
                why=why,
            )
        )
    return out


def _overall(tasks: list[Task]) -> str:
    """The session's outcome: the worst of its tasks that had a signal."""
    judged = [t.outcome for t in tasks if t.outcome != "uncertain"]
    for outcome in ("fail", "partial", "success"):
        if outcome in judged:
            return outcome
    return "uncertain"


def extract_heuristic(
    items: pl.DataFrame,
    facts: RolloutFacts,
    *,
    max_turns: int = MAX_TURNS,
    gap_minutes: float = GAP_MINUTES,
) -> StageOneOutput:
    """Stage one without a model. ``items`` are one session's kept items."""
    if "rollout_id" not in items.columns:
        items = items.with_columns(rollout_id=pl.lit(facts.rollout_id))
    items = assign_segments(items, max_turns=max_turns, gap_minutes=gap_minutes)
    users = items["request"].drop_nulls().to_list()
    if not users:
        return NOOP
    calls = _calls(items)
    tasks = _tasks(items, calls)
    durable = any(
        t.preferences
        or t.failures
        or t.files
        or t.commands
        or any(k.startswith(("Decision:", "Fact:")) for k in t.knowledge)
        for t in tasks
    )
    answers = items.filter((pl.col("item_type") == "message") & (pl.col("role") == "assistant"))
    final_answer = (answers["text"].drop_nulls().to_list() or [""])[-1]
    if not tasks or (not durable and len(final_answer) < 200):
        return NOOP
    task = users[0]
    cwd = one_line(facts.cwd, 300) or "unknown"  # the session's value: one line, capped
    all_files = list(dict.fromkeys(f for t in tasks for f in t.files))
    keywords = _keywords(users, all_files)
    when = facts.updated_at.strftime("%Y-%m-%d %H:%M UTC") if facts.updated_at else "unknown"
    title = tasks[0].title

    def section(name: str, lines: list[str]) -> list[str]:
        return [f"{name}:", *[f"- {x}" for x in lines], ""] if lines else []

    raw_tasks = []
    summary = [f"# {title}", "", f"Rollout context: {cwd}, last updated {when}", ""]
    for n, t in enumerate(tasks, start=1):
        references = [f"rollout {one_line(facts.rollout_id, 300)}"] if n == 1 else []
        references += [f"file {_clip(f, 300)}" for f in t.files[:6]]
        raw_tasks.append(
            RawTask(
                title=t.title,
                outcome=t.outcome,
                preferences=tuple(t.preferences),
                knowledge=tuple(t.knowledge),
                failures=tuple(t.failures),
                references=tuple(references),
            )
        )
        steps = [f"User asked: {_clip(t.requests[0], 300)}"]
        steps += [f"Follow-up: {_clip(f, 200)}" for f in t.requests[1:6]]
        if t.commands:
            ran = list(dict.fromkeys(t.commands))[:6]
            steps.append("Ran: " + ", ".join(f"`{c}`" for c in ran))
        if t.files:
            steps.append("Changed: " + ", ".join(_clip(f, 200) for f in t.files[:8]))
        summary += [
            f"## Task {n}: {t.title}",
            f"Outcome: {t.outcome}, {t.why}",
            "",
            *section("Key steps", steps),
            *section("Things that did not work", t.failures),
            *section("Reusable knowledge", t.knowledge),
        ]
    raw = RawMemory(
        description=_clip(task, 160),
        task_outcome=_overall(tasks),
        cwd=cwd,
        keywords=tuple(keywords),
        tasks=tuple(raw_tasks),
    )
    return StageOneOutput(
        raw_memory=write_raw_memory(raw),
        rollout_summary="\n".join(summary).rstrip() + "\n",
        rollout_slug=slug_for(title),
    )
