"""Tool calls of a batch's sessions, one row per call, paired with their output.

The three formats store a call and its result as two items sharing a ``call_id`` (a Codex
``function_call`` and ``function_call_output``; a Claude Code ``tool_use`` block and the
``tool_result`` block of the next user line; a Pi ``toolCall`` block and a ``toolResult``
message). What each says about the outcome:

- Codex shell output starts with ``Exit code: N`` (or ``Process exited with code N``) and
  ``Wall time: S seconds``; older outputs are JSON with ``metadata.exit_code`` and
  ``metadata.duration_seconds``;
- Claude Code marks a failed result with ``"is_error": true`` in the block, and a failed
  ``Bash`` result starts with ``Exit code N``;
- Pi marks it with ``isError`` on the ``toolResult`` message (``result_errors`` below).

A call failed when its result is marked an error or its exit code is not 0. The duration is
the wall time the agent reported, else the time between the call's line and its output's line.
Every text here comes from redacted items.
"""

from __future__ import annotations

import polars as pl

#: Item types that are a tool call (the ones ``rollouts.n_tool_calls`` counts).
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
#: Item types that are a tool call's output.
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")

#: Characters of an output's head searched for the exit code and wall time.
HEAD_CHARS = 400

EXIT_CODE = r"(?m)^(?:Exit code:? |Process exited with code |exited with code )(-?\d+)"
WALL_TIME = r"(?m)^Wall time: ([0-9.]+) seconds"
ERROR_LINE = (
    r"(?im)^.*(?:error|exception|traceback|failed|failure|fatal|not found|no such file|"
    r"permission denied|cannot|can't|denied|refused|timed out|panic).*$"
)
#: Characters of the error line kept.
ERROR_LINE_CHARS = 200

TOOL_CALL_COLUMNS = pl.Schema(
    {
        "rollout_id": pl.String(),
        "seq": pl.Int32(),
        "file_id": pl.Int64(),
        "call_id": pl.String(),
        "tool": pl.String(),
        "command": pl.String(),
        "started_at": pl.Datetime("us", "UTC"),
        "ended_at": pl.Datetime("us", "UTC"),
        "duration_ms": pl.Int64(),
        "exit_code": pl.Int32(),
        "is_error": pl.Boolean(),
        "failed": pl.Boolean(),
        "has_output": pl.Boolean(),
        "output_chars": pl.Int64(),
        "error_line": pl.String(),
    }
)


def shell_command(args: pl.Expr) -> pl.Expr:
    """The shell command in a call's JSON arguments (``command`` or ``cmd``, a string or an
    argv list; ``bash -lc "script"`` gives the script), else null."""
    raw = pl.coalesce(
        args.str.json_path_match("$.command"),
        args.str.json_path_match("$.cmd"),
    )
    as_list = (
        raw.str.replace(r'^\[\s*"(?:bash|zsh|sh)"\s*,\s*"-[a-z]*c"\s*,\s*', "[")
        .str.strip_prefix("[")
        .str.strip_suffix("]")
        .str.replace_all(r'"\s*,\s*"', " ")
        .str.strip_chars('"')
        .str.replace_all(r"\\\"", '"')
        .str.replace_all(r"\\n", "\n")
    )
    return (
        pl.when(raw.str.starts_with("["))
        .then(as_list)
        .otherwise(raw)
        .str.replace(r"^(?:bash|zsh|sh) -[a-z]*c ", "")
    )


def build_tool_calls(items: pl.LazyFrame, *, result_errors: pl.LazyFrame) -> pl.LazyFrame:
    """One row per tool call of ``items`` (``rollout_id, seq, fid, line_no, ts, item_type,
    name, call_id, text, payload_json``), paired with its output by ``call_id``.

    ``result_errors`` has ``fid, line_no, is_error`` for lines that flag their tool result
    as an error or not (Pi's ``toolResult`` messages).
    """
    calls = items.filter(pl.col("item_type").is_in(CALL_TYPES))
    outputs = _outputs_per_call(
        items.filter(pl.col("item_type").is_in(OUTPUT_TYPES) & pl.col("call_id").is_not_null())
        .join(result_errors, on=["fid", "line_no"], how="left")
        .with_columns(
            is_error=pl.col("is_error")
            | pl.col("payload_json").str.contains(r'"is_error":\s*true').fill_null(False)
        )
    )
    head = pl.col("out_text").str.head(HEAD_CHARS)
    json_meta = pl.col("out_text").str.starts_with("{")
    exit_code = pl.coalesce(
        head.str.extract(EXIT_CODE, 1),
        pl.when(json_meta).then(pl.col("out_text").str.json_path_match("$.metadata.exit_code")),
    ).cast(pl.Int32, strict=False)
    wall_seconds = pl.coalesce(
        head.str.extract(WALL_TIME, 1),
        pl.when(json_meta).then(
            pl.col("out_text").str.json_path_match("$.metadata.duration_seconds")
        ),
    ).cast(pl.Float64, strict=False)
    ts_ms = (pl.col("out_ts") - pl.col("ts")).dt.total_milliseconds()
    has_output = pl.col("out_text").is_not_null() | pl.col("out_ts").is_not_null()
    failed = pl.col("is_error").fill_null(False) | (exit_code.fill_null(0) != 0)
    # a Codex local_shell_call keeps its argv in `action.command`; Pi's bash (`!cmd`) keeps
    # the command as the first line of its text
    command = (
        pl.when(pl.col("item_type") == "local_shell_call")
        .then(
            pl.coalesce(
                shell_command(pl.col("text")),
                pl.col("text").str.split("\n").list.first(),
            )
        )
        .otherwise(shell_command(pl.col("text")))
    )
    tool = pl.coalesce(
        pl.col("name"),
        pl.when(pl.col("item_type") == "local_shell_call").then(pl.lit("local_shell")),
        pl.col("item_type"),
    )
    return (
        calls.join(outputs, on=["rollout_id", "call_id"], how="left")
        .select(
            "rollout_id",
            "seq",
            file_id="fid",
            call_id="call_id",
            tool=tool,
            command=command,
            started_at="ts",
            ended_at="out_ts",
            duration_ms=pl.when(wall_seconds.is_not_null())
            .then((wall_seconds * 1000).round(0))
            .otherwise(ts_ms.clip(lower_bound=0)),
            exit_code=exit_code,
            is_error=pl.col("is_error"),
            failed=failed,
            has_output=has_output,
            output_chars=pl.col("out_text").str.len_chars(),
            error_line=pl.when(failed).then(error_line_expr(pl.col("out_text"))),
        )
        .sort("rollout_id", "seq")
        .cast(TOOL_CALL_COLUMNS)
    )


def error_line_expr(text: pl.Expr) -> pl.Expr:
    """The first line of an output ``text`` that reads like an error, stripped and capped."""
    return text.str.extract(f"({ERROR_LINE})", 1).str.strip_chars().str.head(ERROR_LINE_CHARS)


def error_line_of(text: str) -> str | None:
    """``error_line_expr`` of one text."""
    line = pl.select(error_line_expr(pl.lit(text, dtype=pl.String))).item()
    return str(line) if line is not None else None


def _outputs_per_call(outputs: pl.LazyFrame) -> pl.LazyFrame:
    """``rollout_id, call_id, out_ts, out_text, is_error``: a call's outputs as one, their texts
    joined in ``seq`` order (nulls left out). Most calls have one output: those are taken as
    they are (a null text is then the empty string, as the join gives), so only the few calls
    with several outputs have their (often long) texts copied into a joined one."""
    keys = ["rollout_id", "call_id"]
    alone = pl.len().over(keys) == 1
    single = outputs.filter(alone).select(
        *keys,
        out_ts=pl.col("ts"),
        out_text=pl.col("text").fill_null(""),
        is_error=pl.col("is_error").fill_null(False),
    )
    several = (
        outputs.filter(~alone)
        .group_by(keys)
        .agg(
            out_ts=pl.col("ts").min(),
            out_text=pl.col("text").sort_by("seq").str.join("\n"),
            is_error=pl.col("is_error").fill_null(False).any(),
        )
    )
    return pl.concat([single, several])
