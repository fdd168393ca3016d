"""Secret shapes that used to reach the store (issue 29, point 4), ingested as a user's session
holds them: a git remote whose userinfo is a token alone lands in ``rollouts``; the others in
``items`` and ``tool_calls``. No table may hold any of them afterwards."""

from __future__ import annotations

import json
from pathlib import Path

from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.pipeline.test_no_secret_survives import store_texts
from tests.transforms.test_redact import FIXTURE_SECRETS, _tool_call_arguments, _tool_output

AT = "2026-01-02T03:04:05.000Z"
SESSION = "019b3333-0000-7000-8000-000000000001"
#: a remote's token alone as its userinfo (a classic GitHub OAuth token: 40 hex)
REMOTE_TOKEN = "5f1c9a0e7b3d2c8f4a6e1b9d0c7a3f2e8b4d6c1a"
SHAPES = [fx for fx in FIXTURE_SECRETS if fx.format in {
    "Azure SAS", "URL token", "Password flag", "Split token", "Base64"} or fx.name == "secret-key-base"]  # fmt: skip


def test_the_shapes_that_survived_are_in_no_table(tmp_path: Path) -> None:
    assert len(SHAPES) == 11
    meta = {"timestamp": AT, "type": "session_meta",
            "payload": {"id": SESSION, "cwd": "/srv/app", "source": "cli",
                        "git": {"repository_url": f"https://{REMOTE_TOKEN}@github.com/acme/app.git",
                                "branch": "main"}}}  # fmt: skip
    lines = [json.dumps(meta)]
    for fx in SHAPES:
        lines += [_tool_output(fx), _tool_call_arguments(fx)]
    archive = tmp_path / "archive" / "sessions" / "2026" / "01" / "02"
    archive.mkdir(parents=True)
    (archive / f"rollout-2026-01-02T03-04-05-{SESSION}.jsonl").write_text(
        "\n".join(lines) + "\n", encoding="utf-8"
    )
    s = Settings(archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
                 min_rollout_idle_hours=0)  # fmt: skip

    summary = ingest_archive(s)

    assert summary.quarantined == 0
    texts = store_texts(s.db)
    remotes = [text for where, text in texts if where == "rollouts.git_repository_url"]
    assert remotes == ["https://[REDACTED_SECRET]@github.com/acme/app.git"]
    leaks = sorted(
        {f"{fx.name} in {where}" for fx in SHAPES for where, text in texts
         for needle in fx.needles if needle in text}
        | {f"remote token in {where}" for where, text in texts if REMOTE_TOKEN in text}
    )  # fmt: skip
    assert leaks == []


def test_a_token_cut_by_two_tool_outputs_leaves_neither_half_in_any_table(
    tmp_path: Path,
) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    session = "019b3333-0000-7000-8000-000000000002"
    meta = {"timestamp": AT, "type": "session_meta",
            "payload": {"id": session, "cwd": "/srv/app", "source": "cli"}}  # fmt: skip
    lines = [json.dumps(meta)]
    outputs = [f"$ head -c 20 token.txt\n{token[:20]}", f"{token[20:]}\n$ echo done"]
    for n, output in enumerate(outputs):
        call = {"type": "function_call", "name": "shell", "call_id": f"call_{n}",
                "arguments": json.dumps({"command": ["bash", "-lc", "cat token.txt"]})}  # fmt: skip
        result = {"type": "function_call_output", "call_id": f"call_{n}", "output": output}
        lines += [json.dumps({"timestamp": AT, "type": "response_item", "payload": p})
                  for p in (call, result)]  # fmt: skip
    archive = tmp_path / "archive" / "sessions" / "2026" / "01" / "02"
    archive.mkdir(parents=True)
    (archive / f"rollout-2026-01-02T03-04-05-{session}.jsonl").write_text(
        "\n".join(lines) + "\n", encoding="utf-8"
    )
    s = Settings(archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
                 min_rollout_idle_hours=0)  # fmt: skip

    summary = ingest_archive(s)

    assert summary.quarantined == 0
    texts = store_texts(s.db)
    assert any("echo done" in text for _, text in texts)  # the outputs themselves are stored
    halves = [token[:20], token[20:], token[4:20], token[20:36]]
    leaks = sorted({f"{half} in {where}" for half in halves for where, text in texts
                    if half in text})  # fmt: skip
    assert leaks == []
