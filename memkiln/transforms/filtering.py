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
- beyond Codex's rules, other injected context goes the same way: Codex's older
  ``<user_instructions>`` (AGENTS.md) and ``<turn_aborted>`` notes, Claude Code's
  ``<local-command-caveat>``/``<local-command-stdout>``/``<local-command-stderr>`` and
  ``<ide_opened_file>``/``<ide_selection>`` blocks;
- wrappers around the user's words keep the words only: Codex's IDE context
  (``# Context from my IDE setup:``) keeps what follows ``## My request for Codex:``, a
  custom prompt expanded into the message (``## User Input`` then a fenced block, then the
  prompt's body) keeps the fenced input, and Claude Code's slash-command wrapper
  (``<command-name>/x</command-name>…<command-args>a</command-args>``) becomes ``/x a``, and
  Pi's expanded skill (``<skill name="…" location="…">…</skill>``) keeps what follows it; a
  wrapper with no words left is dropped;
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
    ("<user_instructions>", "</user_instructions>"),
    ("<turn_aborted>", "</turn_aborted>"),
    ("<local-command-caveat>", "</local-command-caveat>"),
    ("<local-command-stdout>", "</local-command-stdout>"),
    ("<local-command-stderr>", "</local-command-stderr>"),
    ("<ide_opened_file>", "</ide_opened_file>"),
    ("<ide_selection>", "</ide_selection>"),
)
#: Codex's IDE wrapper: context first, the user's request after the second heading.
IDE_CONTEXT = "# Context from my IDE setup:"
IDE_REQUEST = r"(?s)## My request for Codex:\s*(.*)$"
#: A custom prompt expanded into the message (spec-kit's ``/speckit.*``): optional front
#: matter, ``## User Input``, the user's words in a fenced block, then the prompt's body.
PROMPT_START = r"^(?s:---\n.*?\n---\s*)?## User Input\s*```"
PROMPT_INPUT = r"(?s)^(?:---\n.*?\n---\s*)?## User Input\s*```[A-Za-z]*\n(.*?)```"
#: Claude Code's slash-command wrapper.
COMMAND_START = r"^<command-(?:name|message)>"
COMMAND_NAME = r"(?s)<command-name>\s*(.*?)\s*</command-name>"
COMMAND_ARGS = r"(?s)<command-args>\s*(.*?)\s*</command-args>"
#: Pi's skill, expanded into the message with its attributes, then the user's words.
PI_SKILL_START = r"^<skill name="
PI_SKILL_WORDS = r"(?s)</skill>\s*(.*)$"


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


def wrapper_part_expr(text: pl.Expr) -> pl.Expr:
    """True for a part that wraps the user's words in injected context (see the module doc)."""
    trimmed = text.str.strip_chars()
    return (
        trimmed.str.starts_with(IDE_CONTEXT)
        | trimmed.str.contains(PROMPT_START)
        | trimmed.str.contains(COMMAND_START)
        | trimmed.str.contains(PI_SKILL_START)
    ).fill_null(False)


def user_words_expr(text: pl.Expr) -> pl.Expr:
    """A wrapper part's text cut to the user's words (null when none are left); any other
    part's text unchanged."""
    trimmed = text.str.strip_chars()
    prompt_input = trimmed.str.extract(PROMPT_INPUT, 1).str.strip_chars()
    command = pl.concat_str(
        [
            trimmed.str.extract(COMMAND_NAME, 1),
            trimmed.str.extract(COMMAND_ARGS, 1).fill_null(""),
        ],
        separator=" ",
    ).str.strip_chars()
    words = (
        pl.when(trimmed.str.starts_with(IDE_CONTEXT))
        .then(trimmed.str.extract(IDE_REQUEST, 1).str.strip_chars())
        .when(trimmed.str.contains(PROMPT_START))
        .then(prompt_input)
        .when(trimmed.str.contains(PI_SKILL_START))
        .then(trimmed.str.extract(PI_SKILL_WORDS, 1).str.strip_chars())
        .otherwise(command)
    )
    empty = words.is_null() | words.is_in(["", "$ARGUMENTS"])
    return (
        pl.when(~wrapper_part_expr(text))
        .then(text)
        .when(empty)
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(words)
    )


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
    part_text = pl.element().struct.field("text")
    kept_parts = pl.col("parts").list.eval(
        pl.element()
        .filter(
            ~injected_part_expr(part_text)
            & ~(wrapper_part_expr(part_text) & user_words_expr(part_text).is_null())
        )
        .struct.with_fields(user_words_expr(pl.field("text")).alias("text"))
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
