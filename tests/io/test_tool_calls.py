"""Tool calls are stored at ingest, one row per call, for all three formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.tool_calls import build_tool_calls

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _codex(archive: Path) -> None:
    def item(at: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": f"2026-01-01T10:00:{at}Z", "type": "response_item", "payload": payload}

    _write(
        archive
        / "sessions/2026/01/01/rollout-2026-01-01T10-00-00-019b0000-0000-7000-8000-000000000001.jsonl",
        [
            {
                "timestamp": "2026-01-01T10:00:00.000Z",
                "type": "session_meta",
                "payload": {
                    "id": "019b0000-0000-7000-8000-000000000001",
                    "timestamp": "2026-01-01T10:00:00.000Z",
                    "cwd": "/work/codex-project",
                    "originator": "codex_cli_rs",
                    "cli_version": "0.101.0",
                    "source": "cli",
                },
            },
            item(
                "00.500",
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "run the tests"}],
                },
            ),
            item(
                "01.000",
                {
                    "type": "function_call",
                    "name": "exec_command",
                    "arguments": json.dumps({"cmd": "pytest -q"}),
                    "call_id": "c1",
                },
            ),
            item(
                "03.000",
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": "Chunk ID: 1\nWall time: 1.5000 seconds\nProcess exited with code 2\nOutput:\nE   ModuleNotFoundError: No module named 'foo'\n",
                },
            ),
            item(
                "04.000",
                {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": json.dumps({"command": ["bash", "-lc", "ls -la"]}),
                    "call_id": "c2",
                },
            ),
            item(
                "04.250",
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nREADME.md\n",
                },
            ),
            item(
                "05.000",
                {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": json.dumps(
                        {
                            "command": [
                                "bash",
                                "-lc",
                                f"curl -H 'Authorization: Bearer {SECRET}' https://api.example",
                            ]
                        }
                    ),
                    "call_id": "c3",
                },
            ),
            item(
                "06.000",
                {
                    "type": "function_call_output",
                    "call_id": "c3",
                    "output": json.dumps(
                        {"output": "ok", "metadata": {"exit_code": 0, "duration_seconds": 0.8}}
                    ),
                },
            ),
            item(
                "07.000",
                {
                    "type": "function_call",
                    "name": "update_plan",
                    "arguments": "{}",
                    "call_id": "c4",
                },
            ),
        ],
    )


def _claude(archive: Path) -> None:
    base = {
        "sessionId": "5b0c0000-0000-4000-8000-000000000002",
        "cwd": "/work/claude-project",
        "version": "2.1.0",
        "gitBranch": "main",
        "entrypoint": "cli",
        "isSidechain": False,
    }
    _write(
        archive / "claude/projects/-work-claude-project/5b0c0000-0000-4000-8000-000000000002.jsonl",
        [
            {
                **base,
                "type": "user",
                "uuid": "u1",
                "timestamp": "2026-01-02T10:00:00.000Z",
                "message": {"role": "user", "content": "build it"},
            },
            {
                **base,
                "type": "assistant",
                "uuid": "u2",
                "timestamp": "2026-01-02T10:00:01.000Z",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "t1",
                            "name": "Bash",
                            "input": {"command": "make build"},
                        }
                    ],
                },
            },
            {
                **base,
                "type": "user",
                "uuid": "u3",
                "timestamp": "2026-01-02T10:00:05.000Z",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "is_error": True,
                            "content": "Exit code 2\nmake: *** No rule to make target 'build'.  Stop.",
                        }
                    ],
                },
            },
            {
                **base,
                "type": "assistant",
                "uuid": "u4",
                "timestamp": "2026-01-02T10:00:06.000Z",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "t2",
                            "name": "Read",
                            "input": {"file_path": "/work/claude-project/Makefile"},
                        }
                    ],
                },
            },
            {
                **base,
                "type": "user",
                "uuid": "u5",
                "timestamp": "2026-01-02T10:00:06.500Z",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t2", "content": "all:\n\techo hi"}
                    ],
                },
            },
        ],
    )


def _pi(archive: Path) -> None:
    def msg(at: str, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "message",
            "id": at,
            "timestamp": f"2026-01-03T10:00:{at}Z",
            "message": message,
        }

    _write(
        archive
        / "pi/sessions/-work-pi-project/2026-01-03T10-00-00.000Z_019b0000-0000-7000-8000-000000000003.jsonl",
        [
            {
                "type": "session",
                "id": "019b0000-0000-7000-8000-000000000003",
                "timestamp": "2026-01-03T10:00:00.000Z",
                "cwd": "/work/pi-project",
            },
            msg(
                "00.100", {"role": "user", "content": [{"type": "text", "text": "read the notes"}]}
            ),
            msg(
                "01.000",
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "toolCall",
                            "id": "p1",
                            "name": "read",
                            "arguments": {"path": "/nope"},
                        }
                    ],
                },
            ),
            msg(
                "01.500",
                {
                    "role": "toolResult",
                    "toolCallId": "p1",
                    "toolName": "read",
                    "content": [
                        {"type": "text", "text": "ENOENT: no such file or directory, open '/nope'"}
                    ],
                    "isError": True,
                },
            ),
            msg(
                "02.000",
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "toolCall",
                            "id": "p2",
                            "name": "bash",
                            "arguments": {"command": "ls notes"},
                        }
                    ],
                },
            ),
            msg(
                "02.200",
                {
                    "role": "toolResult",
                    "toolCallId": "p2",
                    "toolName": "bash",
                    "content": [{"type": "text", "text": "a.md\nb.md"}],
                    "isError": False,
                },
            ),
        ],
    )


def _ingest(archive: Path, db: Path) -> None:
    ingest_archive(
        Settings(archive=archive, db=db, out=archive.parent / "out", prefect=False, progress=False)
    )


def _calls(db: Path) -> pl.DataFrame:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql(
            "select r.format, t.tool, t.command, t.failed, t.exit_code, t.is_error, t.duration_ms, "
            "t.has_output, t.error_line, t.call_id from tool_calls as t join rollouts as r using (rollout_id) "
            "order by r.format, t.seq"
        ).pl()
    finally:
        con.close()


def test_tool_calls_of_all_three_formats_are_stored_with_outcome_and_duration(
    tmp_path: Path,
) -> None:
    archive, db = tmp_path / "archive", tmp_path / "m.duckdb"
    _codex(archive)
    _claude(archive)
    _pi(archive)
    _ingest(archive, db)
    rows = {row["call_id"]: row for row in _calls(db).iter_rows(named=True)}
    assert set(rows) == {"c1", "c2", "c3", "c4", "t1", "t2", "p1", "p2"}

    c1 = rows["c1"]
    assert (c1["format"], c1["tool"], c1["command"]) == ("codex", "exec_command", "pytest -q")
    assert (c1["failed"], c1["exit_code"], c1["duration_ms"]) == (True, 2, 1500)
    assert "ModuleNotFoundError" in c1["error_line"]
    assert (rows["c2"]["command"], rows["c2"]["failed"], rows["c2"]["exit_code"]) == (
        "ls -la",
        False,
        0,
    )
    # older Codex outputs: JSON with metadata
    assert (rows["c3"]["exit_code"], rows["c3"]["duration_ms"], rows["c3"]["failed"]) == (
        0,
        800,
        False,
    )
    assert SECRET not in rows["c3"]["command"] and "[REDACTED_SECRET]" in rows["c3"]["command"]
    # a call without output: not failed, nothing known
    c4 = rows["c4"]
    assert (c4["has_output"], c4["failed"], c4["duration_ms"], c4["exit_code"]) == (
        False,
        False,
        None,
        None,
    )

    t1 = rows["t1"]
    assert (t1["format"], t1["tool"], t1["command"], t1["is_error"], t1["failed"]) == (
        "claude",
        "Bash",
        "make build",
        True,
        True,
    )
    assert (t1["exit_code"], t1["duration_ms"]) == (2, 4000)
    assert (rows["t2"]["failed"], rows["t2"]["is_error"], rows["t2"]["duration_ms"]) == (
        False,
        False,
        500,
    )

    p1 = rows["p1"]
    assert (p1["format"], p1["tool"], p1["is_error"], p1["failed"], p1["duration_ms"]) == (
        "pi",
        "read",
        True,
        True,
        500,
    )
    assert "no such file" in p1["error_line"]
    assert (rows["p2"]["command"], rows["p2"]["failed"], rows["p2"]["is_error"]) == (
        "ls notes",
        False,
        False,
    )


def test_tool_calls_match_the_sessions_counts_and_are_replaced_when_a_session_grows(
    tmp_path: Path,
) -> None:
    archive, db = tmp_path / "archive", tmp_path / "m.duckdb"
    _claude(archive)
    _pi(archive)
    _ingest(archive, db)
    _ingest(archive, db)  # unchanged: nothing read, nothing duplicated
    assert _calls(db).height == 4
    path = next((archive / "pi").rglob("*.jsonl"))
    with path.open("a", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {
                    "type": "message",
                    "id": "x",
                    "timestamp": "2026-01-03T10:00:09.000Z",
                    "message": {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "toolCall",
                                "id": "p3",
                                "name": "bash",
                                "arguments": {"command": "false"},
                            }
                        ],
                    },
                }
            )
            + "\n"
        )
    _ingest(archive, db)
    calls = _calls(db)
    assert calls.height == 5 and calls["call_id"].n_unique() == 5
    con = duckdb.connect(str(db), read_only=True)
    try:
        mismatched = con.sql(
            "select r.rollout_id from rollouts as r left join tool_calls as t using (rollout_id) "
            "group by r.rollout_id, r.n_tool_calls having count(t.seq) <> r.n_tool_calls"
        ).fetchall()
    finally:
        con.close()
    assert mismatched == []


def test_build_tool_calls_pairs_a_call_with_its_output_by_call_id_within_a_session() -> None:
    at = pl.datetime(2026, 1, 1, 10, 0, 0, time_zone="UTC")
    items = pl.DataFrame(
        {
            "rollout_id": ["a", "a", "b", "b"],
            "seq": [0, 1, 0, 1],
            "fid": [1, 1, 2, 2],
            "line_no": [1, 2, 1, 2],
            "item_type": [
                "function_call",
                "function_call_output",
                "function_call",
                "function_call_output",
            ],
            "name": ["shell", None, "shell", None],
            "call_id": ["same", "same", "same", "same"],
            "text": ['{"command":"true"}', "Exit code: 0", '{"command":"false"}', "Exit code: 1"],
            "payload_json": ["{}", "{}", "{}", "{}"],
        }
    ).with_columns(ts=at)
    errors = pl.DataFrame(schema={"fid": pl.Int64, "line_no": pl.Int32, "is_error": pl.Boolean})
    out = build_tool_calls(items.lazy(), result_errors=errors.lazy()).collect()
    assert out.select("rollout_id", "command", "exit_code", "failed").rows() == [
        ("a", "true", 0, False),
        ("b", "false", 1, True),
    ]
