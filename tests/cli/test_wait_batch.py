"""``--wait`` on the Batch API for ``extract`` and ``run``, as on ``backfill``: one command
submits, polls (a line per batch whose status changed) and applies; a request the batch
fails leaves its session failed with its reason and the others applied. Through the
console script against the local server's Batch API."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.builders import make_archive, uid
from tests.commands import memkiln
from tests.fake_openai import FakeOpenAI, Reply, last_user_text


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def model_options(tmp_path: Path, fake: FakeOpenAI) -> list[str]:
    return [
        "--db", str(tmp_path / "m.duckdb"), "--backend", "openai-batch", "--base-url",
        fake.base_url, "--model", "gpt-4.1-mini", "--min-idle-hours", "0", "--no-progress",
        "--no-prefect",
    ]  # fmt: skip


def one_failing(fake: FakeOpenAI) -> None:
    """Three polls see the batch in progress; session 2's request fails in it."""
    fake.batch_polls_in_progress = 3

    def route(body: dict) -> Reply | None:
        return Reply(kind="status", status=400) if uid(2) in last_user_text(body) else None

    fake.route(route)


def check_applied(tmp_path: Path, fake: FakeOpenAI, stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.startswith("batch ")]
    assert [line.split(": ")[1].split(",")[0] for line in lines] == [
        "in_progress", "completed"
    ], stderr  # fmt: skip
    assert "4 of 5 answered, 1 failed" in lines[-1]
    assert len(fake.batches) == 1  # submitted once
    db = tmp_path / "m.duckdb"
    jobs = dict(rows(db, "select rollout_id, status || coalesce(':' || last_reason, '') from stage1_jobs"))  # fmt: skip
    assert jobs == {uid(n): "failed:bad_request" if n == 2 else "succeeded" for n in range(5)}
    assert rows(db, "select status from stage1_batches") == [("applied",)]


@pytest.mark.timeout(600)
def test_extract_wait_submits_polls_and_applies_in_one_command(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 5)
    ingest = memkiln(
        "ingest", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--no-progress", "--no-prefect",
    )  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr
    one_failing(fake_openai)
    options = [*model_options(tmp_path, fake_openai), "--backfill"]
    done = memkiln("extract", *options, "--wait", "--poll-interval", "0.05")
    assert done.returncode == 1, done.stdout + done.stderr  # one session failed
    check_applied(tmp_path, fake_openai, done.stderr)
    assert "failed:bad_request" in done.stdout
    # without --wait, the command submits and returns: nothing to poll, nothing applied
    make_archive(tmp_path / "archive", 7)
    memkiln("ingest", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
            "--no-progress", "--no-prefect")  # fmt: skip
    later = memkiln("extract", *options)
    assert later.returncode == 0, later.stdout + later.stderr
    assert not [line for line in later.stderr.splitlines() if line.startswith("batch ")]
    assert rows(tmp_path / "m.duckdb", "select count(*) from stage1_batches where status = 'applied'") == [(1,)]  # fmt: skip


@pytest.mark.timeout(600)
def test_run_wait_submits_polls_applies_then_writes_the_memories(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 5)
    one_failing(fake_openai)
    done = memkiln(
        "run", "--archive", str(tmp_path / "archive"), "--out", str(tmp_path / "memories"),
        "--backfill", *model_options(tmp_path, fake_openai), "--wait", "--poll-interval", "0.05",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # one session failed
    check_applied(tmp_path, fake_openai, done.stderr)
    assert "failed:bad_request" in done.stdout
    # the four applied sessions' memories were consolidated by the same command
    assert (tmp_path / "memories" / "INDEX.md").is_file()
    (written,) = rows(tmp_path / "m.duckdb", "select count(*) from stage1_outputs")[0]
    assert written == 4
