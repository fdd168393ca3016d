"""The three formats normalize into one item schema (parsed by DuckDB, shaped by Polars)."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import polars as pl
import pytest

from memkiln.io.loader import parse_lines
from memkiln.transforms.normalize import build_items, build_rollouts


def normalize(
    lines: list[dict[str, Any]], path: str = "/archive/x.jsonl"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    good = pl.DataFrame(
        {
            "fid": [1] * len(lines),
            "line_no": list(range(1, len(lines) + 1)),
            "line": [json.dumps(obj) for obj in lines],
            "omitted_bytes": [0] * len(lines),
        },
        schema={"fid": pl.Int64, "line_no": pl.Int32, "line": pl.String, "omitted_bytes": pl.Int32},
    )
    with duckdb.connect(":memory:") as con:
        fields, blocks, formats = parse_lines(con, good)
    items = build_items(fields.lazy(), blocks.lazy()).collect()
    files = formats.with_columns(
        path=pl.lit(path), n_lines=pl.lit(len(lines), pl.Int64), n_quarantined=pl.lit(0, pl.Int64)
    )
    rollouts = build_rollouts(fields.lazy(), items.lazy(), files.lazy()).collect()
    return items, rollouts


def rows(items: pl.DataFrame) -> list[tuple[Any, ...]]:
    return items.select("record_type", "item_type", "role", "name", "call_id", "text").rows()


CODEX = [
    {
        "timestamp": "2026-03-01T10:00:00.000Z",
        "type": "session_meta",
        "payload": {
            "id": "019c0000-aaaa-7bbb-8ccc-000000000001",
            "timestamp": "2026-03-01T09:59:59.000Z",
            "cwd": "/home/u/app",
            "originator": "codex-tui",
            "cli_version": "0.140.0",
            "source": "cli",
            "git": {
                "commit_hash": "c" * 40,
                "branch": "main",
                "repository_url": "git@github.com:u/app.git",
            },
        },
    },
    {
        "timestamp": "2026-03-01T10:00:01.000Z",
        "type": "turn_context",
        "payload": {"cwd": "/home/u/app"},
    },
    {
        "timestamp": "2026-03-01T10:00:02.000Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "<environment_context>x</environment_context>"},
                {"type": "input_text", "text": "fix the build"},
            ],
        },
    },
    {
        "timestamp": "2026-03-01T10:00:03.000Z",
        "type": "response_item",
        "payload": {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"cmd":["make"]}',
            "call_id": "c1",
        },
    },
    {
        "timestamp": "2026-03-01T10:00:04.000Z",
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "c1", "output": "make: *** error 2"},
    },
    {
        "timestamp": "2026-03-01T10:00:05.000Z",
        "type": "event_msg",
        "payload": {"type": "agent_message", "message": "done"},
    },
    {"timestamp": "2026-03-01T10:00:06.000Z", "type": "world_state", "payload": {"anything": 1}},
]


def test_codex_lines_become_one_item_each_with_message_parts() -> None:
    items, rollouts = normalize(CODEX)
    assert rows(items) == [
        ("session_meta", None, None, None, None, None),
        ("turn_context", None, None, None, None, None),
        (
            "response_item",
            "message",
            "user",
            None,
            None,
            "<environment_context>x</environment_context>\nfix the build",
        ),
        ("response_item", "function_call", None, "shell", "c1", '{"cmd":["make"]}'),
        ("response_item", "function_call_output", None, None, "c1", "make: *** error 2"),
        ("event_msg", "agent_message", None, None, None, "done"),
        ("world_state", None, None, None, None, None),
    ]
    assert items["parts"][2].to_list() == [
        {"type": "input_text", "text": "<environment_context>x</environment_context>"},
        {"type": "input_text", "text": "fix the build"},
    ]
    r = rollouts.row(0, named=True)
    assert r["rollout_id"] == "019c0000-aaaa-7bbb-8ccc-000000000001"
    assert r["format"] == "codex"
    assert r["project_key"] == "github.com/u/app"
    assert (r["git_branch"], r["git_commit"], r["source"], r["originator"]) == (
        "main",
        "c" * 40,
        "cli",
        "codex-tui",
    )
    assert r["started_at"].isoformat() == "2026-03-01T09:59:59+00:00"
    assert r["updated_at"].isoformat() == "2026-03-01T10:00:06+00:00"
    assert (r["n_items"], r["n_user_messages"], r["n_tool_calls"]) == (3, 1, 1)
    assert r["is_subagent"] is False


def test_legacy_codex_layout_without_envelope_is_recognized_line_by_line() -> None:
    legacy = [
        {
            "id": "81037e80-2462-435b-bb4c-b4437eae0f88",
            "timestamp": "2025-08-26T03:00:07.759Z",
            "instructions": None,
            "git": None,
        },
        {"record_type": "state"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hello <cwd>/srv/site</cwd>"}],
        },
        {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "k"},
    ]
    items, rollouts = normalize(legacy)
    assert [r[:3] for r in rows(items)] == [
        ("session_meta", None, None),
        ("state", None, None),
        ("response_item", "message", "user"),
        ("response_item", "function_call", None),
    ]
    # timestamps carry forward to lines that have none
    assert items["ts"].null_count() == 0
    assert rollouts["rollout_id"].to_list() == ["81037e80-2462-435b-bb4c-b4437eae0f88"]
    assert rollouts["cwd"].to_list() == ["/srv/site"]


def test_codex_subagent_source_object_marks_the_rollout_as_subagent() -> None:
    meta = json.loads(json.dumps(CODEX[0]))
    meta["payload"]["source"] = {"subagent": "review"}
    _, rollouts = normalize([meta])
    assert rollouts.select("source", "is_subagent").row(0) == ("subagent", True)


CLAUDE = [
    {
        "type": "progress",
        "sessionId": "s-1",
        "cwd": "/p",
        "data": {"type": "hook_progress"},
        "timestamp": "2026-04-01T00:00:00Z",
    },
    {
        "type": "user",
        "sessionId": "s-1",
        "cwd": "/p",
        "gitBranch": "dev",
        "version": "2.1.0",
        "timestamp": "2026-04-01T00:00:01Z",
        "message": {"role": "user", "content": "add tests"},
    },
    {
        "type": "assistant",
        "sessionId": "s-1",
        "cwd": "/p",
        "timestamp": "2026-04-01T00:00:02Z",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "Running them."},
                {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "pytest"}},
            ],
        },
    },
    {
        "type": "user",
        "sessionId": "s-1",
        "cwd": "/p",
        "timestamp": "2026-04-01T00:00:03Z",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "tu1",
                    "content": [{"type": "text", "text": "1 failed"}],
                },
            ],
        },
    },
]


def test_claude_message_blocks_become_separate_items() -> None:
    items, rollouts = normalize(CLAUDE)
    assert rows(items) == [
        ("progress", None, None, None, None, None),
        ("response_item", "message", "user", None, None, "add tests"),
        ("response_item", "reasoning", "assistant", None, None, "hmm"),
        ("response_item", "message", "assistant", None, None, "Running them."),
        ("response_item", "function_call", "assistant", "Bash", "tu1", '{"command":"pytest"}'),
        ("response_item", "function_call_output", "tool", None, "tu1", "1 failed"),
    ]
    r = rollouts.row(0, named=True)
    assert (r["rollout_id"], r["format"], r["cwd"], r["git_branch"], r["originator"]) == (
        "s-1",
        "claude",
        "/p",
        "dev",
        "claude-code",
    )


def test_claude_subagent_file_is_its_own_rollout_pointing_at_its_parent() -> None:
    lines = [{**line, "isSidechain": True, "agentId": "a7"} for line in CLAUDE[1:]]
    _, rollouts = normalize(lines)
    assert rollouts.select("rollout_id", "parent_id", "is_subagent").row(0) == (
        "s-1:agent-a7",
        "s-1",
        True,
    )


PI = [
    {
        "type": "session",
        "version": 3,
        "id": "pi-1",
        "timestamp": "2026-05-01T00:00:00.000Z",
        "cwd": "/w",
    },
    {
        "type": "model_change",
        "id": "m",
        "parentId": None,
        "timestamp": "2026-05-01T00:00:00.100Z",
        "provider": "x",
        "modelId": "y",
    },
    {
        "type": "message",
        "id": "u",
        "timestamp": "2026-05-01T00:00:01.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "why?"}]},
    },
    {
        "type": "message",
        "id": "a",
        "timestamp": "2026-05-01T00:00:02.000Z",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a.py"}},
            ],
        },
    },
    {
        "type": "message",
        "id": "r",
        "timestamp": "2026-05-01T00:00:03.000Z",
        "message": {
            "role": "toolResult",
            "toolCallId": "t1",
            "toolName": "read",
            "content": [{"type": "text", "text": "print(1)"}],
        },
    },
]


def test_pi_messages_and_tool_results_normalize_like_the_others() -> None:
    items, rollouts = normalize(PI)
    assert rows(items) == [
        ("session", None, None, None, None, None),
        ("model_change", None, None, None, None, None),
        ("response_item", "message", "user", None, None, "why?"),
        ("response_item", "message", "assistant", None, None, "Looking."),
        ("response_item", "function_call", "assistant", "read", "t1", '{"path":"a.py"}'),
        ("response_item", "function_call_output", "tool", "read", "t1", "print(1)"),
    ]
    assert rollouts.select("rollout_id", "format", "cwd", "project_key").row(0) == (
        "pi-1",
        "pi",
        "/w",
        "/w",
    )


@pytest.mark.parametrize("content", ["[1, 2]", "[not json"])
def test_a_user_string_that_looks_like_an_array_stays_text(content: str) -> None:
    lines = [CLAUDE[1] | {"message": {"role": "user", "content": content}}]
    items, _ = normalize(lines)
    assert items["text"].to_list() == [content]
