"""``memkiln publish`` and ``memkiln run --publish`` as a new user meets them: a HOME with
each agent installed and a Claude Code MEMORY.md of the user's own notes, sessions of three
projects (one per agent format, each with a secret in it), run, then publish, a dry run, a
second publish and --remove."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.commands import memkiln
from tests.prefect_server import flow_run_state

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-archive"
#: One session per format, each of its own project.
SESSIONS = {
    "claude": "claude/projects/-Users-uzaxirr-work-raze/dfa38aaf-80e5-499c-a197-76e137fe699b.jsonl",
    "pi": "pi/sessions/-Users-ibar-castai-src-kimchi-dev/"
    "2026-04-27T09-02-53.212Z_019dce0b-879b-730d-99c2-d8ae04e716d2.jsonl",
    "codex": "sessions/2026/02/14/rollout-2026-02-14T08-12-07-019c5b35-060f-7693-b14f-9f8f75d4aea6.jsonl",
}
SECRETS = {
    "claude": "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "pi": "sk-proj-" + "Qw3rTy7uIo9pAs1dFg5hJk2lZx8cVb4nM6qW0eRt",
    "codex": "AKIA" + "QX7R2M5T8W3Y6B9D",
}
USER_NOTES = b"# My notes\n\n- Always run the linter before committing.\n"


def _plant(value: object, secret: str) -> bool:
    """Append a sentence with ``secret`` to the first user text found in ``value``."""
    if isinstance(value, dict):
        for key in ("text", "content"):
            if isinstance(value.get(key), str) and value[key].strip():
                value[key] += f" I prefer deploying with the key {secret} always."
                return True
        return any(_plant(v, secret) for v in value.values())
    if isinstance(value, list):
        return any(_plant(v, secret) for v in value)
    return False


def archive_of_three(tmp_path: Path) -> Path:
    archive = tmp_path / "archive"
    for fmt, rel in SESSIONS.items():
        dest = archive / rel
        dest.parent.mkdir(parents=True)
        lines = (SAMPLE / rel).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            record = json.loads(line)
            text = json.dumps(record)
            if '"user"' in text and _plant(
                record.get("message", record.get("payload")), SECRETS[fmt]
            ):
                lines[i] = json.dumps(record)
                break
        else:
            raise AssertionError(f"no user text in {rel}")
        dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return archive


def agents_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    raze = home / ".claude" / "projects" / "-Users-uzaxirr-work-raze" / "memory"
    raze.mkdir(parents=True)
    (raze / "MEMORY.md").write_bytes(USER_NOTES)
    (home / ".omp" / "agent").mkdir(parents=True)
    (home / ".omp" / "agent" / "config.yml").write_text("memory:\n  backend: local\n")
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text("[features]\nmemories = true\n")
    return home


def agent_files(home: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(home)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".cache" not in p.parts
    }


def test_publish_reaches_each_agent_keeps_the_users_notes_and_takes_back_all(
    tmp_path: Path,
) -> None:
    archive = archive_of_three(tmp_path)
    home = agents_home(tmp_path)
    # the Pi project's Claude Code folder is a link to somewhere else
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / ".claude" / "projects" / "-Users-ibar-castai-src-kimchi-dev").symlink_to(elsewhere)
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    env = {"HOME": str(home)}
    where = ["--db", str(db), "--out", str(out)]

    ran = memkiln("run", "--archive", str(archive), "--backfill", "--no-prefect", "--no-progress",
                  *where, env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert len([p for p in out.iterdir() if p.is_dir()]) == 3
    before = agent_files(home)

    # a dry run lists what it would do and writes nothing
    dry = memkiln("publish", "--to", "claude,omp,codex", "--dry-run", *where, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "what publish would do" in dry.stdout and "create" in dry.stdout
    assert agent_files(home) == before and list(elsewhere.iterdir()) == []

    done = memkiln("publish", "--to", "claude,omp,codex", *where, env=env)
    assert done.returncode == 0, done.stderr
    assert len(re.findall(r"symbolic link", done.stdout)) == 1, done.stdout
    assert list(elsewhere.iterdir()) == []
    raze = home / ".claude/projects/-Users-uzaxirr-work-raze/memory/MEMORY.md"
    text = raze.read_bytes()
    assert text.endswith(USER_NOTES)
    assert text.count(b"\n") <= 200 and len(text) <= 25_000
    assert (raze.parent / "memkiln.md").is_file()
    bnpl = "Users-yukikimura-work-bnpl-yield-discount"
    assert (home / f".claude/projects/-{bnpl}/memory/MEMORY.md").is_file()
    for cwd in ("Users-uzaxirr-work-raze", "Users-ibar-castai-src-kimchi-dev", bnpl):
        assert (home / f".omp/agent/memories/--{cwd}--/memory_summary.md").is_file()
    codex = home / ".codex/memories/memory_summary.md"
    assert codex.is_file() and len(codex.read_bytes()) <= 10_000
    published = agent_files(home)
    for name, (data, _) in published.items():
        for secret in SECRETS.values():
            assert secret.encode() not in data, (name, secret)
    # the planted sentences did reach the published memory, with the secret replaced
    assert any(b"[REDACTED_SECRET]" in data for data, _ in published.values())
    assert re.search(r"claude: files written\s*│\s*4", done.stdout), done.stdout

    # a second publish changes no file, mtimes included
    again = memkiln("publish", "--to", "claude,omp,codex", *where, env=env)
    assert again.returncode == 0, again.stderr
    assert agent_files(home) == published

    # status and v_publications say what was published where
    status = memkiln("status", "--db", str(db), env=env)
    assert "published to agents" in status.stdout and "codex" in status.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "select target, count(*) from v_publications where status = 'published' group by 1"
        ).fetchall()
    assert dict(rows) == {"claude": 4, "omp": 6, "codex": 1}

    # --remove: the user's notes byte-identical, nothing of memkiln's left
    removed = memkiln("publish", "--remove", *where, env=env)
    assert removed.returncode == 0, removed.stderr
    assert raze.read_bytes() == USER_NOTES
    assert {k: v[0] for k, v in agent_files(home).items()} == {k: v[0] for k, v in before.items()}


@pytest.mark.parametrize("prefect", [False, pytest.param(True, marks=pytest.mark.prefect_server)])
def test_a_run_with_publish_publishes_as_its_last_phase(
    sample_archive: Path, tmp_path: Path, prefect: bool, request: pytest.FixtureRequest
) -> None:
    api = request.getfixturevalue("prefect_api") if prefect else None
    home = agents_home(tmp_path)
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    result = memkiln(
        "run", "--archive", str(sample_archive), "--db", str(db), "--out", str(out),
        "--backfill", "--no-progress", "--publish", "claude,omp",
        *([] if prefect else ["--no-prefect"]), env={"HOME": str(home)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert re.search(r"claude: files written\s*│\s*\d+", result.stdout), result.stdout
    assert re.search(r"omp: files written\s*│\s*\d+", result.stdout), result.stdout
    assert "codex" not in result.stdout.split("memkiln publish", 1)[1]
    assert list((home / ".claude" / "projects").glob("*/memory/memkiln.md"))
    assert list((home / ".omp" / "agent" / "memories").glob("--*--/memory_summary.md"))
    assert not (home / ".codex" / "memories").exists()
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute(
            "select command, parent_run_id, files_written, flow_run_id from runs order by started_at"
        ).fetchall()
    commands = [r[0] for r in runs]
    assert commands == ["run", "ingest", "extract", "consolidate", "publish"]
    run_id = con_run_id(db)
    last = runs[-1]
    assert last[1] == run_id and last[2] > 0  # a phase of the run, counting its files
    if prefect and api is not None:
        assert last[3] is not None and flow_run_state(api, last[3]) == "COMPLETED"


def con_run_id(db: Path) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("select run_id from runs where command = 'run'").fetchone()
    assert row is not None
    return str(row[0])


def test_publish_refuses_an_unknown_agent(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    duckdb.connect(str(db)).close()
    result = memkiln("publish", "--to", "claude,cursor", "--db", str(db))
    assert result.returncode == 2
    assert "unknown agent 'cursor'" in result.stderr and len(result.stderr.splitlines()) == 1
