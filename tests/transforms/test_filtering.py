"""Memory-relevant filtering: rows in, rows out, one rule at a time."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.normalize import ITEM_COLUMNS


def item(
    record_type: str = "response_item",
    item_type: str | None = "message",
    role: str | None = "user",
    parts: list[str] | None = None,
    text: str | None = None,
) -> dict[str, Any]:
    part_rows = None
    if parts is not None:
        part_rows = [{"type": "input_text", "text": p} for p in parts]
        text = "\n".join(parts)
    return {
        "fid": 1, "line_no": 1, "part_idx": 0, "ts": None, "record_type": record_type,
        "item_type": item_type, "role": role, "name": None, "call_id": None, "text": text,
        "parts": part_rows, "payload_json": "{}", "omitted_bytes": 0,
    }  # fmt: skip


def kept(*rows: dict[str, Any]) -> list[tuple[Any, ...]]:
    frame = pl.DataFrame(list(rows), schema=ITEM_COLUMNS)
    out = filter_memory_items(frame.lazy()).collect()
    return out.select("record_type", "item_type", "role", "text").rows()


def test_only_response_items_and_inter_agent_messages_are_kept() -> None:
    rows = [
        item(record_type=r, parts=["hi"])
        for r in [
            "response_item", "session_meta", "turn_context", "event_msg", "compacted",
            "inter_agent_communication", "world_state", "injected_message", "progress",
        ]
    ]  # fmt: skip
    assert [r[0] for r in kept(*rows)] == ["response_item", "inter_agent_communication"]


@pytest.mark.parametrize(
    ("item_type", "is_kept"),
    [
        ("message", True),
        ("function_call", True),
        ("function_call_output", True),
        ("custom_tool_call", True),
        ("custom_tool_call_output", True),
        ("local_shell_call", True),
        ("web_search_call", True),
        ("tool_search_call", True),
        ("tool_search_output", True),
        ("reasoning", False),
        ("image_generation_call", False),
        ("compaction", False),
        ("ghost_snapshot", False),
        ("image", False),
        ("brand_new_item_type", False),
        (None, False),
    ],
)
def test_item_types_follow_codex_rules(item_type: str | None, is_kept: bool) -> None:
    row = item(
        item_type=item_type,
        role="assistant",
        parts=["x"] if item_type == "message" else None,
        text="x",
    )
    assert bool(kept(row)) is is_kept


@pytest.mark.parametrize("role", ["developer", "system"])
def test_developer_and_system_messages_are_dropped(role: str) -> None:
    assert kept(item(role=role, parts=["rules"])) == []


@pytest.mark.parametrize(
    "part",
    [
        "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nbe terse\n</INSTRUCTIONS>",
        "# AGENTS.md instructions\n<INSTRUCTIONS>x</INSTRUCTIONS>",
        "   \n# agents.md INSTRUCTIONS for /x\n<instructions>y</instructions>\n\t ",
        "<skill>\n<name>deploy</name>\nsteps\n</skill>",
        "<SKILL>upper</SKILL>",
        "<system-reminder>CLAUDE.md says hi</system-reminder>",
    ],
)
def test_injected_parts_are_removed_from_user_messages(part: str) -> None:
    assert kept(item(parts=[part, "fix the tests"])) == [
        ("response_item", "message", "user", "fix the tests")
    ]


def test_a_message_left_with_no_parts_is_dropped() -> None:
    assert kept(item(parts=["<skill>only a skill</skill>"])) == []


@pytest.mark.parametrize(
    "part",
    [
        "# AGENTS.md instructions for /repo\n<INSTRUCTIONS>\nnever closed",
        "please read # AGENTS.md instructions</INSTRUCTIONS>",
        "<environment_context>\n<cwd>/repo</cwd>\n</environment_context>",
        "<subagent_notification>agent 2 finished</subagent_notification>",
        "<skill> in the middle </skill> and more",
    ],
)
def test_parts_that_are_not_exactly_an_injection_stay(part: str) -> None:
    assert kept(item(parts=[part])) == [("response_item", "message", "user", part)]


def test_injection_markers_only_apply_to_user_messages() -> None:
    text = "<skill>quoted by the assistant</skill>"
    assert kept(item(role="assistant", parts=[text])) == [
        ("response_item", "message", "assistant", text)
    ]
