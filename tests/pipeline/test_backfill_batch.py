"""The openai-batch backend against the local server's Batch API: submitted once, polled by
later runs, applied through the same outcome code; a request the batch fails becomes a
failed job with its reason."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import memkiln.pipeline.extract_steps as extract_steps
from memkiln.pipeline.backfill import backfill_job
from memkiln.settings import Settings
from tests.builders import make_archive, uid
from tests.fake_openai import FakeOpenAI, Reply, last_user_text
from tests.pipeline.test_backfill import memkiln


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def batch_settings(tmp_path: Path, archive: Path, fake_openai: FakeOpenAI) -> Settings:
    """The openai-batch backend on the local server, no Prefect."""
    return Settings(
        archive=archive, db=tmp_path / "m.duckdb", out=tmp_path / "memories",
        backend="openai-batch", base_url=fake_openai.base_url, model="gpt-4.1-mini",
        min_rollout_idle_hours=0, max_retries=0, request_timeout_s=10, progress=False,
        prefect=False,
    )  # fmt: skip


def test_a_backfill_through_the_batch_api_completes_over_several_runs(
    tmp_path: Path, sample_archive: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.batch_polls_in_progress = 2  # two polls see it in_progress
    failed: list[dict] = []

    def route(body: dict) -> Reply | None:  # the first stage-one request fails with a 400
        schema = (body.get("response_format") or {}).get("json_schema") or {}
        if schema.get("name") == "stage_one_output" and not failed:
            failed.append(body)
            return Reply(kind="status", status=400)
        return None

    fake_openai.route(route)
    s = batch_settings(tmp_path, sample_archive, fake_openai)
    first = backfill_job(s)
    assert first.extract.batched == 6 and first.extract.batches_open == 0
    assert len(fake_openai.batches) == 1
    # as if killed after the batch was created but before its id was stored: the next run
    # finds the batch made from the stored file instead of sending it again
    with duckdb.connect(str(s.db)) as con:
        con.execute("update stage1_batches set batch_id = null, status = 'uploaded'")
    statuses = []
    for _ in range(4):
        later = backfill_job(s)
        statuses.append(rows(s.db, "select status from stage1_batches")[0][0])
        assert later.extract.batched == 0  # never sent twice
    assert statuses == ["validating", "in_progress", "in_progress", "applied"]
    assert len(fake_openai.batches) == 1
    jobs = dict(rows(s.db, "select status, count(*) from stage1_jobs group by all"))
    assert jobs == {"succeeded": 5, "failed": 1}
    (reason,) = rows(s.db, "select last_reason from stage1_jobs where status = 'failed'")[0]
    assert reason == "bad_request"
    usage = rows(s.db, "select backend, requests from model_usage where phase = 'extract'")
    assert usage and all(backend == "openai-batch" for backend, _ in usage)
    assert (tmp_path / "memories" / "INDEX.md").is_file()


def test_a_batch_whose_outcomes_fail_to_be_written_is_applied_once_by_the_next_run(
    tmp_path: Path, sample_archive: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the outcomes of an ended batch and its 'applied' mark are one transaction: a run that
    # dies between the two (here: the mark raises) records nothing, and the next run applies
    # the batch once, so no attempt is recorded twice
    s = batch_settings(tmp_path, sample_archive, fake_openai)
    fake_openai.batch_polls_in_progress = 0
    first = backfill_job(s)
    assert first.extract.batched == 6

    def dies(con: duckdb.DuckDBPyConnection) -> None:
        raise RuntimeError("killed while the batch's outcomes were written")

    monkeypatch.setattr(extract_steps, "mark_applied", dies)
    with pytest.raises(RuntimeError):
        backfill_job(s)
    assert rows(s.db, "select count(*) from stage1_attempts") == [(0,)]
    assert rows(s.db, "select status from stage1_batches") != [("applied",)]
    monkeypatch.undo()
    backfill_job(s)
    assert rows(s.db, "select status from stage1_batches") == [("applied",)]
    per_session = rows(s.db, "select rollout_id, count(*) from stage1_attempts group by all")
    assert len(per_session) == 6 and all(n == 1 for _, n in per_session)
    jobs = dict(rows(s.db, "select status, count(*) from stage1_jobs group by all"))
    assert jobs == {"succeeded": 6}


def test_a_batch_the_api_refuses_to_create_is_created_by_a_later_run(
    tmp_path: Path, sample_archive: Path, fake_openai: FakeOpenAI
) -> None:
    # the upload succeeds, then creating the batch answers 503 (in the submitting run and in
    # the next one's poll): neither run stops with a traceback, the jobs stay held by the
    # stored file, and the third run creates the batch once; nothing is sent twice
    s = batch_settings(tmp_path, sample_archive, fake_openai)
    fake_openai.batch_polls_in_progress = 0
    fake_openai.batch_create_failures = 2
    first = backfill_job(s)
    assert first.extract.batched == 6 and first.extract.batches_open == 1
    assert rows(s.db, "select batch_id, status from stage1_batches") == [(None, "uploaded")]
    second = backfill_job(s)
    assert second.extract.batched == 0 and second.extract.batches_open == 1
    assert not fake_openai.batches
    third = backfill_job(s)
    assert third.extract.batched == 0
    assert len(fake_openai.batches) == 1 and len(fake_openai.files) >= 1
    fourth = backfill_job(s)
    assert fourth.extract.batches_open == 0
    assert rows(s.db, "select status from stage1_batches") == [("applied",)]
    jobs = dict(rows(s.db, "select status, count(*) from stage1_jobs group by all"))
    assert jobs == {"succeeded": 6}


def test_backfill_wait_submits_polls_and_applies_in_one_command_one_failure_failing_alone(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 5)
    fake_openai.batch_polls_in_progress = 3  # three polls see it in_progress

    def route(body: dict) -> Reply | None:  # session 2's request fails in the batch
        return Reply(kind="status", status=400) if uid(2) in last_user_text(body) else None

    fake_openai.route(route)
    done = memkiln(
        "backfill", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--out", str(tmp_path / "memories"), "--backend", "openai-batch", "--base-url",
        fake_openai.base_url, "--model", "gpt-4.1-mini", "--min-idle-hours", "0",
        "--no-progress", "--no-prefect", "--wait", "--poll-interval", "0.05",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # one session failed
    # one line per status of the batch, as it went
    lines = [line for line in done.stderr.splitlines() if line.startswith("batch ")]
    assert [line.split(": ")[1].split(",")[0] for line in lines] == [
        "in_progress", "completed"
    ], done.stderr  # fmt: skip
    assert len(fake_openai.batches) == 1
    assert "4 of 5 answered, 1 failed" in lines[-1]
    jobs = dict(rows(tmp_path / "m.duckdb", "select rollout_id, status || coalesce(':' || last_reason, '') from stage1_jobs"))  # fmt: skip
    assert jobs == {uid(n): "failed:bad_request" if n == 2 else "succeeded" for n in range(5)}
    assert rows(tmp_path / "m.duckdb", "select status from stage1_batches") == [("applied",)]
    assert (tmp_path / "memories" / "INDEX.md").is_file()
    assert "failed:bad_request" in done.stdout
