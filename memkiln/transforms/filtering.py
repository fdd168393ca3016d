"""What a model may see of a session: memory-relevant items only.

Codex's rules, kept exactly, and their equivalents for the other formats (the item schema is
shared, so one set of expressions serves all three):

- keep ``response_item`` (and inter-agent messages); drop ``session_meta``, ``turn_context``,
  ``event_msg``, ``compacted``, injected messages and every unknown record type;
- keep item types ``message`` (not role ``developer`` or ``system``), ``function_call``,
  ``function_call_output``, ``custom_tool_call``, ``custom_tool_call_output``,
  ``local_shell_call``, ``web_search_call``, ``tool_search_call``, ``tool_search_output``;
  drop ``reasoning`` (Claude Code and Pi thinking blocks included), images, compaction items
  and unknown item types;
- in user messages, drop a part that (trimmed, ASCII case-insensitive) starts with
  ``# AGENTS.md instructions`` and ends with ``</INSTRUCTIONS>``, or starts with ``<skill>``
  and ends with ``</skill>``, or (Claude Code's injection) is one ``<system-reminder>`` block;
  ``<environment_context>`` and ``<subagent_notification>`` parts stay;
- a message left with no parts is dropped.
"""

from __future__ import annotations

import polars as pl

KEPT_RECORD_TYPES = ("response_item", "inter_agent_communication")
KEPT_ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
    "tool_search_call",
    "tool_search_output",
)
DROPPED_ROLES = ("developer", "system")

#: (start, end) markers of injected user-message parts; matched after trimming whitespace,
#: ASCII case-insensitively (``(?i-u:…)`` folds ASCII letters only).
INJECTED_PART_MARKERS = (
    ("# AGENTS.md instructions", "</INSTRUCTIONS>"),
    ("<skill>", "</skill>"),
    ("<system-reminder>", "</system-reminder>"),
)


def _escape(literal: str) -> str:
    special = set(r".^$*+?()[]{}|\#&-~")
    return "".join("\\" + c if c in special else c for c in literal)


def injected_part_expr(text: pl.Expr) -> pl.Expr:
    """True for a message part that is injected instructions, not the user's words."""
    trimmed = text.str.strip_chars()
    hits = [
        trimmed.str.contains(f"^(?i-u:{_escape(start)})")
        & trimmed.str.contains(f"(?i-u:{_escape(end)})$")
        for start, end in INJECTED_PART_MARKERS
    ]
    return pl.any_horizontal(hits).fill_null(False)


def filter_memory_items(items: pl.LazyFrame) -> pl.LazyFrame:
    """Keep the memory-relevant items; strip injected parts from user messages.

    Expects the ``items`` schema (``record_type, item_type, role, parts, text, …``); returns
    the same columns, ``parts`` and ``text`` of user messages rebuilt from the kept parts.
    """
    kept = items.filter(
        pl.col("record_type").is_in(KEPT_RECORD_TYPES)
        & pl.col("item_type").is_in(KEPT_ITEM_TYPES)
        & ~(
            (pl.col("item_type") == "message")
            & pl.col("role").is_in(DROPPED_ROLES).fill_null(False)
        )
    )
    is_user_message = (pl.col("item_type") == "message") & (pl.col("role") == "user")
    kept_parts = pl.col("parts").list.eval(
        pl.element().filter(~injected_part_expr(pl.element().struct.field("text")))
    )
    parts = pl.when(is_user_message).then(kept_parts).otherwise(pl.col("parts"))
    text = (
        pl.when(is_user_message)
        .then(parts.list.eval(pl.element().struct.field("text").drop_nulls()).list.join("\n"))
        .otherwise(pl.col("text"))
    )
    return kept.with_columns(parts=parts, text=text).filter(
        (pl.col("item_type") != "message") | (pl.col("parts").list.len().fill_null(0) > 0)
    )
