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
from memkiln.transforms.tool_calls import shell_command
from memkiln.transforms.trust import is_imperative, risk_reason

SHELL_TOOLS = ("shell", "shell_command", "exec_command", "bash", "Bash", "local_shell", "run")
EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit", "edit", "write", "str_replace_editor")

#: A user sentence that states a standing preference: explicit phrases only ("I prefer",
#: "always", "never", "don't", "from now on"), never the imperative of a one-off request
#: ("please make the colors different enough").
PREFERENCE = (
    r"(?i)(?:\b(?:always|never|i (?:prefer|always|never|like to|don't like|do not like|"
    r"would rather|'d rather|hate it when)|i'd prefer|(?:we|you) (?:always|never)|"
    r"from now on|going forward|in (?:the )?future|as a rule|by default|"
    r"(?:you|we) (?:must|should) (?:not |never |always )?(?:use|run|keep|avoid|write|"
    r"commit|test|ask|check)|stop (?:doing|using|adding)|no more|"
    r"(?:i|we) (?:don't|do not) (?:want|need|like)|i'd like you to (?:always|never)|"
    r"(?:please|pls|plz|plase|pleae) (?:don't|do not|never|always))\b"
    r"|^(?:please,? )?(?:don't|do not|never|always|avoid|prefer)\b)"
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
#: A user sentence that records a decision: explicit phrases only ("we decided", "going
#: with"), never a one-off go-ahead ("alright, let's do a new release").
DECISION = (
    r"(?i)\b(?:we(?:'ve| have)? (?:decided|agreed|chose|settled on)|i(?:'ve| have)? decided|"
    r"(?:we|i)(?:'ll| will) (?:go|stick) with|(?:we're|we are|i'm|i am) going with|"
    r"let's (?:go|stick) with|decision is|the plan is to|we standardi[sz]e on)\b"
)
#: A user sentence that states a fact about the project or environment.
FACT = (
    r"(?i)^(?:(?:fyi|note|btw)[,:]?\s+(?:that\s+)?)?(?:we use|we're using|we run|"
    r"our [\w\- ]{1,30} (?:is|are|uses|runs|lives)|"
    r"the (?:api|db|database|server|repo|app|backend|frontend|ci|build) (?:is|uses|runs|lives)|"
    r"[\w./-]+ (?:is deployed (?:to|on)|runs on|lives in|is located (?:in|at)))\b"
)
#: The user's approval, at the start of their message ("thanks, works now"); a later
#: request that merely mentions "works" ("whatever works the best…") is not approval.
SUCCESS_FEEDBACK = (
    r"(?i)^(?:ok(?:ay)?[,.!]?\s+|yes[,.!]?\s+|yep[,.!]?\s+|cool[,.!]?\s+)?(?:thanks|thank you|"
    r"thx|ty|(?:it |that |this )?works(?: now| great| perfectly)?|(?:it |that )?worked|"
    r"working now|it's working|perfect|great(?: job| work)?|looks good|lgtm|nice(?: work)?|"
    r"awesome|excellent|that did it|fixed|good job|solved|all good|ship it|well done|"
    r"love it|exactly)\b"
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
    r"(?:mise|just|task|uv|poetry|hatch|pdm|deno|composer) (?:run )?(?:test|lint|build|check|ci)\b|"
    # running the program the task changed: a run or seed script
    r"python3? (?:-m )?[\w./-]+(?:\.py)?(?:\s|$)|node [\w./-]+\.[cm]?js\b|"
    r"(?:npm|pnpm|yarn|bun) (?:run )?seed\b|cargo run|go run|mise run|uv run)"
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
#: One-off actions: they ran once for this session's work and are not a procedure to repeat
#: (commits, pushes, edits in place, file moves).
ONE_OFF_COMMAND = (
    r"^(?:git (?:add|commit|push|pull|fetch|checkout|switch|merge|tag|stash|restore|rm|mv|"
    r"cherry-pick|revert|clone|init|reset)|gh (?:issue|pr|release|repo) (?:create|comment|"
    r"close|edit|merge)|sed -i|perl -[a-z]*i|mkdir|mv|cp|rm|touch|chmod|chown|ln|kill|pkill|"
    r"killall|npm version|npm publish|cargo publish|twine upload|"
    r"(?:npm|pnpm|yarn|bun) (?:run )?(?:publish|release|version\S*|deploy\S*)|"
    r"(?:cargo|npm|pnpm|yarn|git|uv|poetry|go mod) init)\b"
)
#: Read-only inspection: never remembered as a command that worked.
TRIVIAL_COMMAND = (
    r"^(?:ls|ll|cat|bat|less|more|sed -n|head|tail|rg|grep|egrep|fgrep|ag|find|fd|pwd|echo|"
    r"printf|wc|git (?:status|diff|log|show|branch|remote|rev-parse|ls-files|blame|stash list)|"
    r"nl|tree|which|type|whereis|file|stat|du|df|date|env|printenv|Get-Content|Get-ChildItem|"
    r"Select-String|dir|applypatch|apply_patch|open|xdg-open|code|"
    r"(?:sqlite3|psql|mysql|duckdb) [^|;&]*(?:\.schema|\.tables|\bselect\b|\\d)|"
    r"gh (?:issue|pr|run|repo) "
    r"(?:view|list|status)|jq|awk|sort|uniq|diff|true|:|sleep|clear|history|man|help)\b"
    r"|--version\b|--help\b|^\S+ -[vVh]$|<<|\n"
)
#: A command's wrapping that says nothing of what it does: ``cd X &&``, ``2>&1``, a trailing
#: ``| tail -N`` / ``| head -N`` / ``| grep …`` / ``| cat``.
COMMAND_NOISE = (
    (r"^(?:cd|pushd) (?:\\?\"[^\"]*\"|'[^']*'|[^&;|]+?)\s*(?:&&|;)\s*", ""),
    (r"\s*[12]?>&[12]", ""),
    (r"\s*[12]?>\s*/dev/null", ""),
    (
        r"(?:\s*\|\s*(?:tail|head)(?:\s+-n)?(?:\s+-?\d+)?|\s*\|\s*cat|\s*\|\s*tee \S+|"
        r"\s*\|\s*(?:grep|rg|less|more|sort|uniq)\b(?:[^|\"']|\"[^\"]*\"|'[^']*')*)+\s*$",
        "",
    ),
    (r"\s+", " "),
)
#: An output that shows a sandbox or permission denial (Codex's sandbox, EPERM, EACCES).
DENIED = (
    r"(?i)(?:sandbox (?:denied|error)|failed in sandbox|rejected by (?:the )?(?:sandbox|user)|"
    r"operation not permitted|\bEPERM\b|\bEACCES\b|permission denied|"
    r"not allowed by (?:the )?(?:sandbox|policy)|approval (?:was )?denied)"
)
#: A command that hides its own failure (``|| true``, ``|| :``, ``; true``).
HIDES_FAILURE = r"(?:\|\|\s*(?:true|:|echo\b[^\n]*)|;\s*true)\s*$"
ERROR_LINE = (
    r"(?im)^.*(?:error|exception|traceback|failed|failure|fatal|not found|no such file|"
    r"permission denied|cannot|can't|denied|refused|timed out|panic).*$"
)
EXIT_FAILURE = (
    r"(?i)(?:exit code:? -?[1-9]\d*|\"exit_code\":\s*-?[1-9]\d*|exited with (?:code|status) "
    r"-?[1-9]\d*|process exited with code -?[1-9]\d*|\"is_error\":\s*true)"
)
#: An output that states a zero exit.
EXIT_OK = (
    r"(?i)(?:exit code:? 0\b|\"exit_code\":\s*0\b|exited with (?:code|status) 0\b|"
    r"process exited with code 0\b)"
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


#: A message longer than this is mostly pasted: only its first and last paragraphs are the
#: user's own words.
PASTED_MESSAGE_CHARS = 1_500
#: A paragraph that is pasted material, not prose: code, a quote, a log or a list of paths.
PASTED_PARAGRAPH = (
    r"(?m)```|^\s*>|^\s{4,}\S|^\s*(?:at |File \"|Traceback|\$ |[A-Z]:\\\\|/\S+:\d+)|"
    r"^\s*[\[{<]|\b(?:error|warning|info|debug)\s*[:\[]|\t"
)
#: A sentence start that can open a statement (not a continuation word: the middle of a
#: sentence cut by a line break that was not joined).
STATEMENT_START = r"^[\"'(]?\p{L}"
#: A sentence that reports what happened ("I tried …", "got a crash"), not a standing rule.
REPORT = (
    r"(?i)\b(?:i|we) (?:tried|ran|got|saw|selected|noticed|clicked|opened|was|were|had|did|"
    r"never saw|never got)\b|\bgot (?:a|an|the|this|that) \w+|\bshould never happen\b"
)
#: A one-off request, even when it says "always" or "don't": a change asked for now
#: ("Also remove the -o option and always write to …"), or an instruction for the moment
#: ("don't make any changes yet").
ONE_OFF_REQUEST = (
    r"(?i)^(?:(?:yes|ok(?:ay)?|also|and|then|now|so|alright|right)[,.!]?\s+)*(?:please\s+)?"
    r"(?:remove|make|add|change|update|rename|move|fix|create|implement|replace|delete|write|"
    r"put|set|do it|let's|go ahead|try)\b|\b(?:yet|for now|right now|this time|today|"
    r"at the moment|for the moment|in this (?:pr|commit|change)|"
    r"until (?:we|i|it|this|that)(?:'re|'m| are| am| is)? (?:done|finished|ready))\b"
    # a condition, not a rule ("if this turns out to be a barrier, you can stop using nix")
    r"|^(?:however,?\s+|but\s+|and\s+)?if\b"
)
#: A clause that starts a preference after a comma or semicolon.
CLAUSE_BREAK = r"([,;])\s+((?i:i'd prefer|i prefer|we prefer|i'd rather|we'd rather)\b)"
#: A sentence that starts with a continuation word: the middle of a sentence.
CONTINUATION = (
    r"^(?:and|or|but|so|to|of|for|with|in|on|at|by|from|than|that|which|instead|because|"
    r"as|the|a|an|then|just|only|also|too|etc)\b"
)


def own_words(text: str) -> str:
    """The user's own prose of a message: pasted paragraphs (code, quotes, logs) left out,
    the first and last paragraphs only of a long message, hard-wrapped lines joined."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    if len(text) > PASTED_MESSAGE_CHARS and len(paragraphs) > 2:
        paragraphs = [paragraphs[0], paragraphs[-1]]
    kept = [p for p in paragraphs if not re.search(PASTED_PARAGRAPH, p) and len(p) <= 1_200]
    # a line break inside a sentence (hard wrap, dictation) is a space
    return "\n\n".join(re.sub(r"(?<=[^\s.!?:])\n(?=[^\n\s\-*•>#\d])", " ", p) for p in kept)


def _sentences(texts: list[str], pattern: str, limit: int) -> list[str]:
    """Sentences of the user's own words (``own_words``) that match ``pattern``, whole and
    as written (negation kept; a list or quote marker in front removed), that state rather
    than ask or insult, and start as a statement does."""
    if not texts:
        return []
    frame = pl.DataFrame({"t": [own_words(t) for t in texts]}, schema={"t": pl.String}).select(
        pl.col("t")
        .str.replace_all(r"([.!?])\s+", "${1}\n")
        .str.replace_all(CLAUSE_BREAK, "${1}\n${2}")  # "do it there, I'd prefer …": two sentences
        .str.split("\n")
        .explode()
    )
    hits = (
        frame.select(pl.col("t").str.strip_chars().str.replace(LIST_MARKER, "").str.strip_chars())
        .filter(~pl.col("t").str.contains(ONE_OFF_REQUEST) if pattern != FACT else pl.lit(True))
        .filter(
            pl.col("t").str.contains(pattern)
            & (pl.col("t").str.len_chars().is_between(12, 300))
            & (pl.col("t").str.count_matches(r"\S+") >= 3)
            & pl.col("t").str.contains(STATEMENT_START)
            & ~pl.col("t").str.contains(CONTINUATION)
            & ~pl.col("t").str.contains(REPORT)
            & ~pl.col("t").str.contains(QUESTION)
            & ~pl.col("t").str.contains(INSULT)
            & ~pl.col("t").str.contains(r"[{};]\s*$|[`]{3}")
        )
        .unique(maintain_order=True)
        .head(limit)
    )
    return [" ".join(t.split()) for t in hits["t"].to_list()]


def normalize_command(command: str) -> str:
    """A command without the wrapping that says nothing of what it does (``cd X &&``,
    ``2>&1``, a trailing ``| tail -20``), so its variants count as one."""
    out = command.strip()
    for pattern, repl in COMMAND_NOISE:
        out = re.sub(pattern, repl, out)
    return out.strip()


def _calls(items: pl.DataFrame) -> pl.DataFrame:
    """Tool calls with their command (if a shell), their output, and whether they failed:
    by the structured result stored at ingest (``call_failed``: every format's error flag and
    exit line), else by the output's exit line; a sandbox denial, or an error hidden by
    ``|| true``, is a failure too. ``pending``: the call never returned."""
    calls = items.filter(
        pl.col("item_type").is_in(["function_call", "custom_tool_call", "local_shell_call"])
    )
    structured = "call_failed" in items.columns
    calls = calls.select(
        "seq",
        "segment_index",
        "name",
        "call_id",
        args="text",
        stored_failed=pl.col("call_failed") if structured else pl.lit(None, dtype=pl.Boolean),
        stored_exit=pl.col("call_exit_code") if structured else pl.lit(None, dtype=pl.Int32),
    )
    outputs = (
        items.filter(pl.col("item_type").is_in(["function_call_output", "custom_tool_call_output"]))
        .group_by("call_id", maintain_order=True)
        .agg(output=pl.col("text").drop_nulls().str.join("\n"))
    )
    command = shell_command(pl.col("args"))
    # the output's own text: an older Codex JSON output's ``output``, without the leading
    # ``Exit code:``/``Wall time:``/``Output:`` lines
    out_text = pl.coalesce(pl.col("output").str.json_path_match("$.output"), "output").str.replace(
        r"^(?:(?:Exit code|Wall time|Process exited with code)[^\n]*\n|Output:\n)+", ""
    )
    exited_zero = (pl.col("stored_exit") == 0).fill_null(False) | pl.col("output").str.contains(
        EXIT_OK
    ).fill_null(False)
    by_text = pl.col("output").str.contains(EXIT_FAILURE).fill_null(False)
    search_miss = (  # a search that finds nothing exits 1: not a failure
        pl.col("command").str.contains(r"^(?:cd [^&;]+&& ?)?(?:rg|grep|egrep|diff|test|\[) ")
        & pl.col("output").str.contains(
            r"(?i)(?:exit code:? 1\b|exited with code 1\b|\"exit_code\":\s*1\b)"
        )
    ).fill_null(False)
    return (
        calls.join(outputs, on="call_id", how="left")
        .with_columns(
            command=pl.when(pl.col("name").is_in(SHELL_TOOLS) | command.is_not_null())
            .then(command)
            .otherwise(None),
            pending=pl.col("output").is_null(),
        )
        .with_columns(
            failed=(
                pl.coalesce(pl.col("stored_failed"), by_text)
                | (pl.col("output").str.contains(DENIED).fill_null(False) & ~exited_zero)
                | (
                    pl.col("command").str.contains(HIDES_FAILURE).fill_null(False)
                    & out_text.str.contains(ERROR_LINE).fill_null(False)
                )
            )
            & ~search_miss,
            error_line=out_text.str.extract(f"({ERROR_LINE})", 1).str.strip_chars(),
            first_line=out_text.str.strip_chars().str.extract(r"^([^\n]*)", 1),
        )
        .with_columns(  # a check is the command itself, not a script that mentions one
            is_check=pl.col("command").str.split("\n").list.first().str.contains(TEST_OR_BUILD)
            & ~pl.col("command").str.contains("<<")
        )
        .with_columns(pl.col("is_check", "failed").fill_null(False))
        .with_columns(  # a check piped into head/tail/grep hides its exit: its errors decide
            failed=pl.col("failed")
            | (
                pl.col("is_check")
                & pl.col("command").str.contains(r"\|\s*(?:head|tail|grep|rg)\b").fill_null(False)
                & out_text.str.contains(r"(?m)\berror\b|\bERR!|^FAIL\b|\bfailed\b").fill_null(False)
            )
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


def _outcome(
    feedback: list[str], calls: pl.DataFrame, answer: str, files: list[str]
) -> tuple[str, str]:
    """A task's outcome and why, from its end state: a task that stopped mid-way (its last
    call never returned, or no answer came) is ``uncertain``; then the user's feedback
    (latest first: a complaint anywhere in its opening, approval only at its start; the
    user's next request is not approval), then the last test or build; the agent's own
    claim, or a command that exited 0, is not a verification: ``partial`` when the agent
    says it could not finish, else ``uncertain``."""
    if calls.height and bool(calls["pending"].to_list()[-1]):
        return "uncertain", "the session stopped before the last tool call returned"
    for text in reversed(feedback):
        text = _opening(text)
        if re.search(FAIL_FEEDBACK, text):
            return "fail", f'the user said: "{_clip(_quotable(text), 100)}"'
        if re.search(SUCCESS_FEEDBACK, text.strip()):
            return "success", f'the user said: "{_clip(_quotable(text), 100)}"'
    checks = calls.filter("is_check")
    if checks.height:
        last = checks.row(-1, named=True)
        shown = _clip(normalize_command(last["command"]), 60)
        if last["failed"]:
            return "partial", f"the last check, `{shown}`, failed"
        if checks["failed"].any():
            return "success", f"`{shown}` passed after failing"
        return "success", f"`{shown}` passed"
    if not answer:
        return "uncertain", "the session ended without an answer"
    final = _opening(answer) + " " + answer[-300:]
    if re.search(NOT_DONE_CLAIM, final):
        return "partial", "the agent said it could not finish"
    if calls.height and bool(calls["failed"].to_list()[-1]):
        return "partial", "the last tool call failed and nothing was verified after it"
    return "uncertain", "nothing was verified or confirmed"


def _quotable(text: str) -> str:
    return text.replace('"', "'")


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


#: Words a request opens with that say nothing of its topic.
FILLER = (
    r"(?i)^(?:(?:ok(?:ay)?|alright|hey|hi|hello|so|well|now|yes|yeah|great|thanks|cool|hmm|hm|"
    r"please|pls|also|and|but|then)\b[,.!:]?\s*)+"
    r"|^(?:(?:can|could|would|will) you(?: please)?|i (?:want|need|would like) (?:you )?to|"
    r"let's|let us|help me(?: to)?|i'd like (?:you )?to)\s+"
)
#: Characters of a task's topic title.
TITLE_CHARS = 72


def topic_title(request: str) -> str:
    """A short topic title for a task: the request's first substantive line without filler
    openings ("ok, can you please …"), insults or markup; when that is long, its first
    sentence, cut at a word boundary."""
    line = _title_line(request)
    title = line.strip()
    for _ in range(3):
        title = re.sub(FILLER, "", title.strip())
    title = re.sub(INSULT, "", title)
    title = re.sub(r"[`*_#<>\[\]]+", "", title)
    title = " ".join(title.split()).strip(" ,;:-")
    if len(title.split()) < 2:
        title = " ".join(line.split())
    if len(title) > TITLE_CHARS:
        title = re.split(r"(?<=[.!?])\s", title, maxsplit=1)[0]
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS + 1].rsplit(" ", 1)[0].rstrip(" ,.;:") + "…"
    return title[:1].upper() + title[1:]


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
    #: the task reached an end: the agent answered after its last tool call returned
    finished: bool = True


#: Characters of a quoted error line.
ERROR_QUOTE_CHARS = 160


def _worked(calls: pl.DataFrame) -> list[str]:
    """Commands that exited 0 and are worth repeating, normalized and without repeats,
    checks first; never a read-only inspection, a call that never returned, or a risky
    command."""
    ok = calls.filter(
        pl.col("command").is_not_null() & ~pl.col("failed") & ~pl.col("pending")
    ).sort("is_check", "seq", descending=[True, False])
    out: list[str] = []
    for command in ok["command"].to_list():
        plain = normalize_command(command)
        if (
            not plain
            or len(plain) > 120
            or re.search(TRIVIAL_COMMAND, plain)
            or re.search(ONE_OFF_COMMAND, plain)
            or risk_reason(plain) is not None
        ):
            continue
        if plain not in out:
            out.append(plain)
    return out[:6]


def _quoted_error(row: dict[str, object]) -> str:
    """A failed call's error as data: its error line (else its first output line) in a code
    span, capped; nothing when that line reads as an instruction (text a tool printed is
    never advice) or holds a risky command."""
    for key in ("error_line", "first_line"):
        line = row.get(key)
        if isinstance(line, str) and line.strip():
            text = _clip(line.replace("`", "'"), ERROR_QUOTE_CHARS)
            if is_imperative(text) or risk_reason(text) is not None:
                return "an error"
            return f"`{text}`"
    exit_code = row.get("exit_code")
    return f"exit code {exit_code}" if exit_code else "a non-zero exit"


def _failures(calls: pl.DataFrame) -> list[str]:
    """Failure → fix pairs: the failed command (normalized; the same one once), its error
    quoted as data, and the later related command that exited 0, if any."""
    out: list[str] = []
    seen: set[str] = set()
    # a shell command's failure only: a file tool's miss is the agent's own slip
    for row in calls.filter(pl.col("failed") & pl.col("command").is_not_null()).iter_rows(
        named=True
    ):
        what = normalize_command(row["command"])
        if not what or what in seen or risk_reason(what) is not None:
            continue
        seen.add(what)
        fix = ""
        if row["command"]:
            later_ok = calls.filter(
                (pl.col("seq") > row["seq"])
                & ~pl.col("failed")
                & ~pl.col("pending")
                & (pl.col("name") == row["name"])
            )["command"].drop_nulls()
            related = [
                normalize_command(c)
                for c in later_ok
                if _related(row["command"], c) and risk_reason(c) is None
            ]
            related = [c for c in related if c and c != what]
            fix = f"; then `{_clip(related[0], 80)}` exited 0" if related else ""
        out.append(f"`{_clip(what, 100)}` failed with {_quoted_error(row)}{fix}")
        if len(out) == 8:
            break
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
        # a sentence is in one section only: a preference first, then a decision
        decisions = [d for d in _sentences(asked, DECISION, 6) if d not in seen_prefs]
        seen_prefs.update(decisions)
        facts = [f for f in _sentences(asked, FACT, 6) if f not in seen_prefs]
        seen_prefs.update(facts)
        failures = _failures(seg_calls)
        worked = _worked(seg_calls)
        if not (seg_calls.height or answer or prefs or decisions or facts):
            continue  # a request nobody acted on: nothing to remember
        # a check run after the user's last word in the task is newer than that word
        asked_seqs = requests.filter(pl.col("segment_index") == index)["seq"].to_list()
        later_checks = seg_calls.filter(pl.col("seq") > asked_seqs[-1])
        outcome, why = _outcome(
            following if later_checks.filter("is_check").height else asked[1:] + following,
            seg_calls if following or not later_checks.filter("is_check").height else later_checks,
            answer,
            files,
        )
        knowledge = [f"Decision: {d}" for d in decisions] + [f"Fact: {f}" for f in facts]
        if worked:
            knowledge.append("Commands that worked: " + ", ".join(f"`{c}`" for c in worked))
        first = next((r for r in asked if _substantive(r)), asked[0])
        commands = [
            _clip(normalize_command(c), 120) for c in seg_calls["command"].drop_nulls().to_list()
        ]
        commands = [c for c in dict.fromkeys(commands) if c and risk_reason(c) is None]
        out.append(
            Task(
                title=topic_title(first),
                requests=asked,
                feedback=following,
                preferences=prefs,
                knowledge=knowledge,
                failures=failures,
                commands=commands,
                files=files,
                outcome=outcome,
                why=why,
                # answered, and its last call returned or an earlier request of it got its
                # turn (the user asked something new after it)
                finished=bool(answer)
                and (
                    not (seg_calls.height and bool(seg_calls["pending"].to_list()[-1]))
                    or len({" ".join(r.lower().split())[:60] for r in asked}) > 1
                ),
            )
        )
    return out


def _overall(tasks: list[Task]) -> str:
    """The session's outcome: its end state, the outcome of its last task (an earlier task
    that failed and was followed by more work does not decide it)."""
    return tasks[-1].outcome if tasks else "uncertain"


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
    # durable: what the user said, a failure and its fix, or work the agent finished; a
    # session that stopped mid-way with nothing else is the no-op answer
    durable = any(
        t.preferences
        or any(k.startswith(("Decision:", "Fact:")) for k in t.knowledge)
        or (t.finished and bool(t.files or t.commands or t.failures))
        for t in tasks
    )
    if not tasks or not durable:
        return NOOP
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
        steps = [f"User asked: {_clip(t.requests[0], 200)}"]
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
        description=_clip(title, 160),
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
