"""Segments: a session split into runs of related turns, in the spirit of OpenHuman's archivist.

A turn starts at each user message that holds the user's words (a message of injected
context only, such as ``<environment_context>``, or a bare slash command, starts none). A new
segment starts at the session's first turn (``start``), at a turn that opens with an explicit
switch of topic ("now let's", "switching to", "next task", …: ``topic_switch``), at a turn
that follows a pause longer than ``gap_minutes`` (``time_gap``), and after ``max_turns`` turns
without any of those (``turn_limit``). Items before the first turn belong to the first
segment. Everything is a Polars expression over the kept items; nothing here reads or writes.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from memkiln.transforms.provenance import is_user_words

#: Defaults: a long session is cut every ``MAX_TURNS`` turns; a pause this long is a new task.
MAX_TURNS = 10
GAP_MINUTES = 30.0

#: Context blocks inside a user message that are not the user's words (Codex keeps them in
#: the model's input, so the filter does too).
CONTEXT_BLOCK = (
    r"(?s)<environment_context>.*?</environment_context>"
    r"|<subagent_notification>.*?</subagent_notification>"
    r"|<user_action>.*?</user_action>"
    r"|<bash-(?:input|stdout|stderr)>.*?</bash-(?:input|stdout|stderr)>"
    r"|<user_shell_command>.*?</user_shell_command>"
    r"|<user-prompt-submit-hook>.*?</user-prompt-submit-hook>"
    r"|<task-notification>.*?</task-notification>"
)
#: A message that is only a slash command (``/model opus``, ``/clear``): an instruction to the
#: tool, not a request.
SLASH_COMMAND = r"^/[\w.:-]+(?: [ -~]{0,40})?$"  # short ASCII arguments: a setting, not a request
#: An explicit switch of topic at the start of a message.
TOPIC_SWITCH = (
    r"(?i)^(?:ok(?:ay)?[,.!]?\s+|great[,.!]?\s+|thanks[,.!]?\s+|good[,.!]?\s+|perfect[,.!]?\s+)?"
    r"(?:now,? (?:let'?s|let us|we (?:need|should|can)|can you|could you|please|i (?:want|need))"
    r"|now (?:add|make|implement|create|write|fix|build|do|update|change|move|refactor)\b"
    r"|switching (?:to|gears)|switch(?:ing)? gears|let'?s switch|let'?s move on|moving on"
    r"|next,? (?:task|step|thing|up|let'?s|please|can you|i want)|next task|new task"
    r"|on to the next|another (?:task|thing|question|feature)|different (?:topic|task|question)"
    r"|unrelated(?: question| task|:)|separate (?:question|task))"
)


def request_text_expr(text: pl.Expr | None = None) -> pl.Expr:
    """The user's words in a user message's text: context blocks removed, trimmed; null when
    nothing is left or the message is a bare slash command."""
    words = (pl.col("text") if text is None else text).str.replace_all(CONTEXT_BLOCK, "")
    words = words.str.strip_chars()
    return (
        pl.when((words.str.len_chars() > 0) & ~words.str.contains(SLASH_COMMAND))
        .then(words)
        .otherwise(None)
    )


def assign_segments(
    items: pl.DataFrame, *, max_turns: int = MAX_TURNS, gap_minutes: float = GAP_MINUTES
) -> pl.DataFrame:
    """``items`` (``rollout_id, seq, ts, item_type, role, text``) in session order, with
    ``request`` (the user's words of a turn's message, else null), ``segment_index`` (0-based
    within the session) and ``boundary`` (why a segment starts, on its first turn only)."""
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    by_session: dict[str, Any] = {"partition_by": "rollout_id"}
    is_user = (pl.col("item_type") == "message") & (pl.col("role") == "user")
    if "provenance" in items.columns:  # a tool's output or an injected text asks for nothing
        is_user = is_user & is_user_words(pl.col("provenance"))
    request = pl.when(is_user).then(request_text_expr()).otherwise(None)
    framed = items.sort("rollout_id", "seq").with_columns(request=request)
    turn = pl.col("request").is_not_null()
    gap = (pl.col("ts") - pl.col("ts").shift(1).over(**by_session)) > pl.duration(
        seconds=gap_minutes * 60
    )
    opening = pl.col("request").str.slice(0, 200)
    hard = (
        pl.when(turn & (turn.cast(pl.Int32).cum_sum().over(**by_session) == 1))
        .then(pl.lit("start"))
        .when(turn & opening.str.contains(TOPIC_SWITCH))
        .then(pl.lit("topic_switch"))
        .when(turn & gap.fill_null(False))
        .then(pl.lit("time_gap"))
        .otherwise(None)
    )
    framed = framed.with_columns(_hard=hard).with_columns(
        _block=pl.col("_hard").is_not_null().cum_sum().over(**by_session)
    )
    turn_in_block = turn.cast(pl.Int32).cum_sum().over("rollout_id", "_block")
    limit = turn & pl.col("_hard").is_null() & ((turn_in_block - 1) % max_turns == 0)
    boundary = pl.coalesce(pl.col("_hard"), pl.when(limit).then(pl.lit("turn_limit")))
    return (
        framed.with_columns(boundary=boundary)
        .with_columns(
            segment_index=(
                pl.col("boundary").is_not_null().cast(pl.Int32).cum_sum().over(**by_session) - 1
            )
            .clip(lower_bound=0)
            .cast(pl.Int32)
        )
        .drop("_hard", "_block")
    )


def segment_items(
    items: pl.DataFrame, *, max_turns: int = MAX_TURNS, gap_minutes: float = GAP_MINUTES
) -> pl.DataFrame:
    """One row per segment: ``rollout_id, segment_index, first_seq, last_seq, started_at,
    boundary, turns``. ``items`` are kept items (``rollout_id, seq, ts, item_type, role,
    text``) of one or more sessions; a session without a turn is one ``start`` segment."""
    assigned = assign_segments(items, max_turns=max_turns, gap_minutes=gap_minutes)
    return (
        assigned.group_by("rollout_id", "segment_index", maintain_order=True)
        .agg(
            first_seq=pl.col("seq").min().cast(pl.Int32),
            last_seq=pl.col("seq").max().cast(pl.Int32),
            started_at=pl.coalesce(
                pl.col("ts").filter(pl.col("boundary").is_not_null()).first(), pl.col("ts").first()
            ),
            boundary=pl.col("boundary").drop_nulls().first().fill_null("start"),
            turns=pl.col("request").is_not_null().sum().cast(pl.Int32),
        )
        .sort("rollout_id", "segment_index")
    )
