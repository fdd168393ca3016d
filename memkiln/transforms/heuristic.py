"""The offline, deterministic stage-one extractor.

It reads the same kept, redacted items a model would, and fills the same three fields in the
same formats from evidence in the session:

- the user's requests (the first is the task, later ones are follow-ups);
- preferences, decisions, commitments and facts, recognized from the user's phrasing;
- failed tool calls with their error lines (the lessons), and whether a later call worked;
- the commands that ran and the files that changed;
- the final answer, and an outcome (success / partial / fail / uncertain) from the user's
  feedback.

A session with nothing durable gets the no-op answer. Evidence is pulled out with Polars
expressions over the items; only the few resulting strings are formatted in Python.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from memkiln.transforms.outputs import NOOP, StageOneOutput
from memkiln.transforms.text import one_line

SHELL_TOOLS = ("shell", "shell_command", "exec_command", "bash", "Bash", "local_shell", "run")
EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit", "edit", "write", "str_replace_editor")

#: A user sentence that states a preference or standing instruction.
PREFERENCE = (
    r"(?i)\b(?:always|never|don't|do not|please (?:use|keep|avoid|don't|do not|make)|"
    r"i (?:prefer|like|want|need)|make sure|avoid|stop|instead of|rather than|must|should not|"
    r"shouldn't)\b"
)
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
    r"awesome|excellent|that did it|fixed|good job)\b"
)
FAIL_FEEDBACK = (
    r"(?i)\b(?:doesn't work|does not work|not working|still (?:broken|failing|fails|wrong|not)|"
    r"wrong|revert|undo|broke|broken|failed|worse|no,? that)\b"
)
ERROR_LINE = (
    r"(?im)^.*(?:error|exception|traceback|failed|failure|fatal|not found|no such file|"
    r"permission denied|cannot|can't|denied|refused|timed out|panic).*$"
)
EXIT_FAILURE = (
    r"(?:Exit code: [1-9]\d*|\"exit_code\":\s*[1-9]\d*|exited with (?:code|status) [1-9]\d*|"
    r"Process exited with code [1-9]\d*|\"is_error\":\s*true)"
)
ENV_BLOCK = (
    r"(?s)<environment_context>.*?</environment_context>"
    r"|<subagent_notification>.*?</subagent_notification>"
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


def _user_texts(items: pl.DataFrame) -> list[str]:
    users = items.filter((pl.col("item_type") == "message") & (pl.col("role") == "user"))
    cleaned = users.select(
        pl.col("text").str.replace_all(ENV_BLOCK, "").str.strip_chars().alias("t")
    ).filter(pl.col("t").str.len_chars() > 0)
    return cleaned["t"].to_list()


def _sentences(texts: list[str], pattern: str, limit: int) -> list[str]:
    if not texts:
        return []
    frame = pl.DataFrame({"t": texts}).select(
        pl.col("t").str.split("\n").list.eval(pl.element().str.split(". ")).explode().explode()
    )
    hits = (
        frame.select(pl.col("t").str.strip_chars())
        .filter(
            pl.col("t").str.contains(pattern)
            & (pl.col("t").str.len_chars().is_between(8, 400))
            & ~pl.col("t").str.starts_with("<")
            & ~pl.col("t").str.ends_with("?")  # a question is not a standing instruction
        )
        .unique(maintain_order=True)
        .head(limit)
    )
    return [_clip(t, 220) for t in hits["t"].to_list()]


def _calls(items: pl.DataFrame) -> pl.DataFrame:
    """Tool calls with their command (if a shell), their output, and whether they failed."""
    calls = items.filter(
        pl.col("item_type").is_in(["function_call", "custom_tool_call", "local_shell_call"])
    ).select("seq", "name", "call_id", args="text")
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
            error_line=pl.col("output").str.extract(f"({ERROR_LINE})", 1),
        )
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


def _outcome(feedback: list[str], failures_at_end: bool, has_answer: bool) -> tuple[str, str]:
    for text in reversed(feedback):
        text = _opening(text)
        if re.search(FAIL_FEEDBACK, text):
            return "fail", f'the user said: "{_clip(text, 100)}"'
        if re.search(SUCCESS_FEEDBACK, text):
            return "success", f'the user said: "{_clip(text, 100)}"'
    if failures_at_end:
        return "partial", "the last tool calls failed and the user gave no feedback"
    if has_answer:
        return "uncertain", "the agent answered; the user gave no feedback"
    return "uncertain", "the session ended without an answer"


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


def extract_heuristic(items: pl.DataFrame, facts: RolloutFacts) -> StageOneOutput:
    """Stage one without a model. ``items`` are one session's kept items (``seq`` ordered)."""
    items = items.sort("seq")
    users = _user_texts(items)
    if not users:
        return NOOP
    task = users[0]
    follow_ups = users[1:]
    preferences = _sentences(users, PREFERENCE, 8)
    decisions = _sentences(users, DECISION, 6)
    project_facts = _sentences(users, FACT, 6)
    calls = _calls(items)
    commands = [
        _clip(c, 120) for c in calls.filter(pl.col("command").is_not_null())["command"].to_list()
    ]
    failed = calls.filter("failed")
    failures: list[str] = []
    for row in failed.head(8).iter_rows(named=True):
        what = row["command"] or row["name"] or "a tool call"
        line = row["error_line"] or "non-zero exit"
        fix = ""
        if row["command"]:
            later_ok = calls.filter(
                (pl.col("seq") > row["seq"]) & ~pl.col("failed") & (pl.col("name") == row["name"])
            )["command"].drop_nulls()
            related = [c for c in later_ok if _related(row["command"], c)]
            fix = f"; a later `{_clip(related[0], 80)}` succeeded" if related else ""
        failures.append(f"`{_clip(what, 100)}` failed: {_clip(line, 160)}{fix}")
    files = _files_changed(items)
    answers = items.filter((pl.col("item_type") == "message") & (pl.col("role") == "assistant"))
    final_answer = answers["text"].drop_nulls().to_list()[-1] if answers.height else ""
    durable = preferences or decisions or project_facts or failures or files or commands
    if not durable and len(final_answer) < 200:
        return NOOP
    failures_at_end = bool(calls.height and calls["failed"].to_list()[-1])
    outcome, why = _outcome(follow_ups, failures_at_end, bool(final_answer))
    title = _clip(task.splitlines()[0] if task.strip() else task, 80)
    cwd = one_line(facts.cwd, 300) or "unknown"  # the session's value: one line, capped
    keywords = _keywords(users, files)
    when = facts.updated_at.strftime("%Y-%m-%d %H:%M UTC") if facts.updated_at else "unknown"

    def section(name: str, lines: list[str]) -> list[str]:
        return [f"{name}:", *[f"- {x}" for x in lines], ""] if lines else []

    knowledge = [f"Decision: {d}" for d in decisions] + [f"Fact: {f}" for f in project_facts]
    if commands:
        shown = list(dict.fromkeys(commands))[:8]
        knowledge.append("Commands that ran: " + ", ".join(f"`{c}`" for c in shown))
    if files:
        knowledge.append("Files changed: " + ", ".join(_clip(f, 200) for f in files[:12]))
    if final_answer:
        knowledge.append("Final answer: " + _clip(final_answer, 400))
    references = [f"rollout {one_line(facts.rollout_id, 300)}"]
    references += [f"file {_clip(f, 300)}" for f in files[:6]]
    raw = [
        "---",
        f"description: {_clip(task, 160)}",
        f"task_outcome: {outcome}",
        f"cwd: {cwd}",
        f"keywords: {', '.join(keywords)}",
        "---",
        f"### Task 1: {title}",
        f"task_outcome: {outcome}",
        "",
        *section("Preference signals", preferences),
        *section("Reusable knowledge", knowledge),
        *section("Failures and how to do differently", failures),
        *section("References", references),
    ]
    steps = [f"User asked: {_clip(task, 300)}"]
    steps += [f"Follow-up: {_clip(f, 200)}" for f in follow_ups[:5]]
    if commands:
        steps.append("Ran: " + ", ".join(f"`{c}`" for c in list(dict.fromkeys(commands))[:6]))
    if files:
        steps.append("Changed: " + ", ".join(_clip(f, 200) for f in files[:8]))
    summary = [
        f"# {title}",
        "",
        f"Rollout context: {cwd}, last updated {when}",
        "",
        f"## Task 1: {title}",
        f"Outcome: {outcome}, {why}",
        "",
        *section("Key steps", steps),
        *section("Things that did not work", failures),
        *section("Reusable knowledge", knowledge),
    ]
    return StageOneOutput(
        raw_memory="\n".join(raw).rstrip() + "\n",
        rollout_summary="\n".join(summary).rstrip() + "\n",
        rollout_slug=slug_for(title),
    )
