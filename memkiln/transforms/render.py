"""Kept items as compact JSON, one object per line: the ``rollout_contents`` a model reads."""

from __future__ import annotations

import polars as pl

from memkiln.transforms.redact import RuleSet, redact_expr


def item_json_expr() -> pl.Expr:
    """One compact JSON object per item, shaped like the item type (Codex's field names)."""
    t = pl.col("item_type")
    message = pl.struct(type=t, role=pl.col("role"), content=pl.col("parts"))
    call = pl.struct(type=t, name=pl.col("name"), call_id=pl.col("call_id"), arguments="text")
    custom = pl.struct(type=t, name=pl.col("name"), call_id=pl.col("call_id"), input="text")
    output = pl.struct(type=t, call_id=pl.col("call_id"), output="text")
    action = pl.struct(type=t, call_id=pl.col("call_id"), action="text")
    return (
        pl.when(t == "message")
        .then(message.struct.json_encode())
        .when(t == "function_call")
        .then(call.struct.json_encode())
        .when(t == "custom_tool_call")
        .then(custom.struct.json_encode())
        .when(t.is_in(["function_call_output", "custom_tool_call_output", "tool_search_output"]))
        .then(output.struct.json_encode())
        .otherwise(action.struct.json_encode())
    )


def render_items(items: pl.LazyFrame, *, rules: RuleSet) -> pl.LazyFrame:
    """Add ``item_json`` to kept items, redacted again with the current rules (items stored
    under an older rule set get the newer rules too)."""
    return items.with_columns(item_json=redact_expr(item_json_expr(), rules=rules))


def contents_by_rollout(kept: pl.LazyFrame, *, rules: RuleSet) -> pl.LazyFrame:
    """``rollout_id, contents``: each session's rendered items as JSON lines, in order."""
    return (
        render_items(kept, rules=rules)
        .group_by("rollout_id")
        .agg(contents=pl.col("item_json").sort_by("seq").str.join("\n"))
    )
