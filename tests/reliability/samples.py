"""Small valid sessions of the three formats, and ways to damage one line of them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

CODEX: list[dict[str, Any]] = [
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
            "git": {"branch": "main", "repository_url": "git@github.com:u/app.git"},
        },
    },
    {
        "timestamp": "2026-03-01T10:00:01.000Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "fix the build"}],
        },
    },
    {
        "timestamp": "2026-03-01T10:00:02.000Z",
        "type": "response_item",
        "payload": {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"command":["make"]}',
            "call_id": "c1",
        },
    },
    {
        "timestamp": "2026-03-01T10:00:03.000Z",
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    },
    {
        "timestamp": "2026-03-01T10:00:04.000Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Built."}],
        },
    },
]

CLAUDE: list[dict[str, Any]] = [
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
                }
            ],
        },
    },
    {
        "type": "assistant",
        "sessionId": "s-1",
        "cwd": "/p",
        "timestamp": "2026-04-01T00:00:04Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
    },
]

PI: list[dict[str, Any]] = [
    {
        "type": "session",
        "version": 3,
        "id": "pi-1",
        "timestamp": "2026-05-01T00:00:00.000Z",
        "cwd": "/w",
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

FORMATS: dict[str, list[dict[str, Any]]] = {"codex": CODEX, "claude": CLAUDE, "pi": PI}

#: Values of the wrong type put where a field was.
WRONG_VALUES: tuple[Any, ...] = (None, 0, -1.5, True, "", "x", [], [None], {}, {"type": None})


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key or index path inside a JSON value."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield (*prefix, i)
            yield from paths(inner, (*prefix, i))


def damaged(obj: dict[str, Any], path: tuple[Any, ...], value: Any, *, drop: bool) -> Any:
    """A copy of ``obj`` with the field at ``path`` removed (``drop``) or set to ``value``."""
    out = copy.deepcopy(obj)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out
