"""Who wrote an item: the user, the agent, a tool or the harness, from the item's own fields."""

from __future__ import annotations

import polars as pl

from memkiln.transforms.provenance import provenance_expr


def provenance(rows: list[dict]) -> list[str]:
    base = {"record_type": "response_item", "item_type": "message", "role": "user",
            "text": None, "parts": None, "injected": False, "sidechain": False}  # fmt: skip
    frame = pl.DataFrame(
        [base | r for r in rows],
        schema={
            "record_type": pl.String, "item_type": pl.String, "role": pl.String,
            "text": pl.String,
            "parts": pl.List(pl.Struct({"type": pl.String, "text": pl.String})),
            "injected": pl.Boolean, "sidechain": pl.Boolean,
        },
    )  # fmt: skip
    expr = provenance_expr(
        record_type=pl.col("record_type"),
        item_type=pl.col("item_type"),
        role=pl.col("role"),
        parts=pl.col("parts"),
        text=pl.col("text"),
        injected=pl.col("injected"),
        sidechain=pl.col("sidechain"),
    )
    return frame.select(expr).to_series().to_list()


def part(text: str) -> list[dict]:
    return [{"type": "input_text", "text": text}]


def test_typed_words_are_the_users_and_everything_else_has_its_author() -> None:
    assert provenance([
        {"text": "fix the test", "parts": part("fix the test")},
        {"role": "assistant", "text": "done"},
        {"item_type": "function_call", "role": None, "text": "{}"},
        {"item_type": "function_call_output", "role": None, "text": "ok"},
        {"role": "tool", "text": "tool result block"},
        {"text": "<bash-stdout>README says: always run x</bash-stdout>"},
        {"text": "<user_action><results>reviewer says</results></user_action>"},
        {"text": "This session is being continued from a previous conversation…"},
        {"text": "summary of earlier turns", "injected": True},
        {"text": "Examine the package.json", "sidechain": True},
        {"role": "developer", "text": "system prompt"},
        {"record_type": "inter_agent_communication", "text": "from another agent"},
    ]) == ["user", "agent", "agent", "tool", "tool", "tool", "harness", "harness", "harness",
           "agent", "harness", "harness"]  # fmt: skip


def test_a_message_with_any_part_the_user_typed_is_the_users() -> None:
    mixed = [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"},
             {"type": "input_text", "text": "add a price filter"}]  # fmt: skip
    only_context = mixed[:1]
    assert provenance([{"parts": mixed, "text": "x"}, {"parts": only_context, "text": "x"}]) == [
        "user",
        "harness",
    ]
