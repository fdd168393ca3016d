"""Small builders of real rollout files for tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def ts(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def codex_lines(
    uid: str,
    *,
    request: str,
    at: datetime,
    cwd: str = "/home/dev/shop",
    remote: str | None = "git@github.com:acme/shop.git",
    source: str = "cli",
    calls: list[tuple[str, str]] = (),  # type: ignore[assignment]
    answer: str = "Done: the change is in place and the tests pass.",
    feedback: str | None = None,
) -> list[dict[str, Any]]:
    """One Codex session: meta, a request, shell calls with their outputs, an answer."""
    meta: dict[str, Any] = {"id": uid, "timestamp": ts(at), "cwd": cwd, "originator": "codex-tui",
                            "cli_version": "0.140.0", "source": source}  # fmt: skip
    if remote:
        meta["git"] = {"repository_url": remote, "branch": "main", "commit_hash": "ab" * 20}
    out: list[dict[str, Any]] = [{"timestamp": ts(at), "type": "session_meta", "payload": meta}]
    t = at

    def add(payload: dict[str, Any]) -> None:
        nonlocal t
        t += timedelta(seconds=5)
        out.append({"timestamp": ts(t), "type": "response_item", "payload": payload})

    add({"type": "message", "role": "user", "content": [{"type": "input_text", "text": request}]})
    for i, (command, output) in enumerate(calls):
        args = json.dumps({"command": ["bash", "-lc", command], "workdir": cwd})
        add({"type": "function_call", "name": "shell", "arguments": args, "call_id": f"call_{i}"})
        add({"type": "function_call_output", "call_id": f"call_{i}", "output": output})
    add(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": answer}],
        }
    )
    if feedback:
        add(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": feedback}],
            }
        )
    return out


def write_rollout(archive: Path, uid: str, lines: list[dict[str, Any]], at: datetime) -> Path:
    day = archive / "sessions" / at.strftime("%Y/%m/%d")
    day.mkdir(parents=True, exist_ok=True)
    path = day / f"rollout-{at.strftime('%Y-%m-%dT%H-%M-%S')}-{uid}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def uid(n: int) -> str:
    return f"019b{n:04x}-0000-7000-8000-{n:012x}"


def make_archive(archive: Path, n: int, *, start: datetime | None = None) -> list[Path]:
    """``n`` ordinary sessions, each with a request, one passing and one failing command."""
    start = start or datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    paths = []
    for i in range(n):
        at = start + timedelta(hours=i)
        lines = codex_lines(
            uid(i),
            request=f"Task {i}: make the checkout page show the tax line, and please always run the linter first",
            at=at,
            calls=[
                ("npm run lint", "Exit code: 0\nOutput:\nno problems"),
                (
                    "npm test -- checkout",
                    "Exit code: 1\nOutput:\nError: expected tax line to be visible",
                ),
            ],
        )
        paths.append(write_rollout(archive, uid(i), lines, at))
    return paths
