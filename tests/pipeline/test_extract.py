"""Stage one end to end: real files, a real DuckDB, the real openai client against a local
OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from memkiln.io.jobs import claim_many, release_orphans
from memkiln.io.store import fetch_pl, open_store
from memkiln.llm.ratelimit import TRIES_PER_REQUEST
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.prompts import STAGE_ONE_PROMPT_VERSION
from memkiln.transforms.summaries import ExtractSummary
from tests.builders import codex_lines, make_archive, uid, write_rollout
from tests.fake_openai import FakeOpenAI, Reply, last_user_text

REPO = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path, fake: FakeOpenAI | None = None, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "backfill": True,
        "min_rollout_idle_hours": 0,
    }
    if fake is not None:
        base |= {
            "backend": "openai",
            "base_url": fake.base_url,
            "model": "fake-model",
            "max_retries": 0,
            "request_timeout_s": 5,
        }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def extract(s: Settings) -> ExtractSummary:
    return extract_store(s)


@pytest.fixture
def archive_of_six(tmp_path: Path) -> list[Path]:
    paths = make_archive(tmp_path / "archive", 6)
    ingest_archive(settings(tmp_path))
    return paths


def test_a_normal_run_stores_one_output_per_session_and_a_rerun_sends_nothing(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    s = settings(tmp_path, fake_openai)
    first = extract(s)

    assert first.outcomes == {"succeeded": 6}
    assert fake_openai.count("/chat/completions") == 6
    body = fake_openai.requests[0]["body"]
    assert body["response_format"]["json_schema"]["strict"] is True
    assert set(body["response_format"]["json_schema"]["schema"]["required"]) == {
        "raw_memory", "rollout_summary", "rollout_slug"
    }  # fmt: skip
    stored = rows(
        s.db,
        "select rollout_id, backend, model, prompt_version, input_tokens > 0 from stage1_outputs",
    )
    assert len(stored) == 6 and {r[1:] for r in stored} == {
        ("openai", "fake-model", STAGE_ONE_PROMPT_VERSION, True)
    }

    second = extract(s)
    assert fake_openai.count() == 6  # zero new requests
    assert second.decisions == {"up_to_date": 6}


def test_switching_backend_or_model_extracts_again_and_then_is_up_to_date(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    assert extract(settings(tmp_path)).outcomes == {"succeeded": 6}  # heuristic
    s = settings(tmp_path, fake_openai)
    assert extract(s).outcomes == {"succeeded": 6}
    assert fake_openai.count() == 6
    assert rows(s.db, "select distinct backend, model from stage1_outputs") == [
        ("openai", "fake-model")
    ]
    assert extract(s).decisions == {"up_to_date": 6}
    other = extract(settings(tmp_path, fake_openai, model="other-model"))
    assert other.outcomes == {"succeeded": 6} and fake_openai.count() == 12
    assert rows(s.db, "select max(attempts) from stage1_jobs") == [(1,)]


def test_appending_to_one_session_sends_exactly_one_request(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    s = settings(tmp_path, fake_openai)
    extract(s)
    with archive_of_six[2].open("a") as fh:
        fh.write(json.dumps({
            "timestamp": "2026-10-01T12:00:00.000Z", "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "also show the VAT number"}]},
        }) + "\n")  # fmt: skip
    ingest_archive(s)
    again = extract(s)
    assert fake_openai.count() == 7
    assert again.outcomes == {"succeeded": 1}


def test_every_bad_answer_ends_in_its_documented_outcome_and_the_run_goes_on(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    kinds = {
        0: Reply("ok"),
        1: Reply("noop"),
        2: Reply("extra_key"),
        3: Reply("missing_key"),
        4: Reply("broken_json"),
        5: Reply("status", status=429, retry_after=0.05),
        6: Reply("status", status=500),
        7: Reply("timeout", delay=3),
        8: Reply("status", status=400),
        9: Reply("secret"),
    }
    make_archive(tmp_path / "archive", len(kinds))
    ingest_archive(settings(tmp_path))

    def route(body: dict) -> Reply | None:
        text = last_user_text(body)
        for n, reply in kinds.items():
            if uid(n) in text:
                return reply
        return None

    fake_openai.route(route)
    s = settings(tmp_path, fake_openai, max_retries=1, request_timeout_s=1)
    summary = extract(s)

    assert summary.outcomes == {
        "succeeded": 2,
        "succeeded_no_output": 1,
        "failed:schema_mismatch": 2,
        "failed:invalid_json": 1,
        "failed:rate_limited": 1,
        "failed:server_error": 1,
        "failed:timeout": 1,
        "failed:bad_request": 1,
    }
    per_rollout = dict(
        rows(s.db, "select rollout_id, coalesce(last_reason, status) from stage1_jobs")
    )
    assert per_rollout[uid(5)] == "rate_limited" and per_rollout[uid(8)] == "bad_request"
    # a 500 was retried once by the client; a 429 went again after its Retry-After each time
    # the run's pace admitted it, until the request's tries were used; a 400 never is
    hits = {
        n: sum(uid(n) in last_user_text(r["body"]) for r in fake_openai.requests) for n in kinds
    }
    assert hits[5] == TRIES_PER_REQUEST and hits[6] == 2 and hits[8] == 1
    assert summary.rate_limited == TRIES_PER_REQUEST - 1
    # the model's secret never reaches the store
    memory = rows(s.db, f"select raw_memory from stage1_outputs where rollout_id = '{uid(9)}'")[0][
        0
    ]
    assert "sk-proj-" not in memory and "hunter2hunter2" not in memory
    assert "[REDACTED_SECRET]" in memory
    outcomes = dict(
        rows(
            s.db,
            "select outcome || coalesce(':' || reason, ''), count(*) from stage1_attempts group by 1",
        )
    )
    assert outcomes["failed:timeout"] == 1
    # sessions whose answer failed wait for their retry time; those the service failed
    # (429, 5xx, timeout) are sent again by the next run at once
    again = extract(s)
    assert again.decisions.get("retry_later") == 4
    assert again.decisions.get("take") == 3
    assert summary.sessions_failed == 7 and again.sessions_failed == 3


def test_a_no_op_answer_removes_the_earlier_output(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    s = settings(tmp_path, fake_openai)
    extract(s)
    with archive_of_six[0].open("a") as fh:
        fh.write(json.dumps({"timestamp": "2026-10-02T00:00:00.000Z", "type": "response_item",
                             "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "never mind"}]}}) + "\n")  # fmt: skip
    ingest_archive(s)
    fake_openai.default = Reply("noop")
    extract(s)
    assert rows(s.db, f"select count(*) from stage1_outputs where rollout_id = '{uid(0)}'") == [
        (0,)
    ]
    assert rows(s.db, f"select status from stage1_jobs where rollout_id = '{uid(0)}'") == [
        ("succeeded_no_output",)
    ]


def test_selection_skips_exec_subagent_and_recent_sessions(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    now = datetime.now(UTC)
    for n, (source, age) in enumerate(
        [("cli", timedelta(days=1)), ("exec", timedelta(days=1)), ("subagent", timedelta(days=1)),
         ("cli", timedelta(minutes=5)), ("cli", timedelta(days=40)), ("vscode", timedelta(days=2))]
    ):  # fmt: skip
        at = now - age
        write_rollout(
            archive, uid(n), codex_lines(uid(n), request="fix it", at=at, source=source), at
        )
    s = settings(tmp_path, backfill=False, min_rollout_idle_hours=6)
    ingest_archive(s)
    summary = extract(s)
    assert summary.decisions == {
        "take": 2, "source_not_selected": 1, "subagent": 1, "still_active": 1, "too_old": 1
    }  # fmt: skip


def test_killing_the_process_mid_run_then_rerunning_leaves_one_outcome_per_session(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 24)
    s = settings(tmp_path)
    ingest_archive(s)
    log = tmp_path / "requests.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--latency", "0.4", "--log", str(log)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ready = server.stdout.readline().strip()  # type: ignore[union-attr]
        assert ready.startswith("READY ")
        base_url = ready.split()[1]
        cmd = [
            sys.executable, "-m", "memkiln.cli", "extract", "--no-prefect", "--no-progress",
            "--db", str(s.db), "--backend", "openai", "--base-url", base_url, "--model", "fake-model",
            "--backfill", "--min-idle-hours", "0", "--concurrency", "2", "--max-retries", "0",
        ]  # fmt: skip
        worker = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.exists() and len(log.read_text().splitlines()) >= 8:
                break
            assert worker.poll() is None, worker.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        sent_before_kill = len(log.read_text().splitlines())
        assert 8 <= sent_before_kill < 24

        killed = rows(s.db, "select status, count(*) from stage1_jobs group by 1")
        assert dict(killed).get("running", 0) >= 1  # the dead run left leased jobs behind

        summary = extract(Settings(**(s.model_dump() | {
            "backend": "openai", "base_url": base_url, "model": "fake-model", "max_retries": 0,
        })))  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=10)

    assert summary.orphans_taken_over >= 1
    jobs = rows(s.db, "select status, count(*) from stage1_jobs group by 1")
    assert jobs == [("succeeded", 24)]
    assert rows(s.db, "select count(*), count(distinct rollout_id) from stage1_outputs") == [
        (24, 24)
    ]
    assert rows(s.db, "select status from runs where command = 'extract' order by started_at") == [
        ("abandoned",),
        ("succeeded",),
    ]


def test_the_responses_api_works_the_same(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    s = settings(tmp_path, fake_openai, api="responses")
    summary = extract(s)
    assert summary.outcomes == {"succeeded": 6}
    assert fake_openai.count("/responses") == 6 and fake_openai.count("/chat/completions") == 0
    body = fake_openai.requests[0]["body"]
    assert body["text"]["format"]["type"] == "json_schema" and body["text"]["format"]["strict"]
    assert "memory extractor" in body["instructions"]


def closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_jobs_claimed_by_runs_that_died_before_sending_them_keep_their_retry_budget(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 1)
    s = settings(tmp_path, fake_openai, retry_delay_hours=0)
    ingest_archive(s)
    con = open_store(s.db)
    try:  # two runs claim the session, then die before sending it
        todo = fetch_pl(con, "select rollout_id, updated_at from rollouts")
        for dead in ("run-dead-1", "run-dead-2"):
            release_orphans(con, run_id=dead)
            claim_many(con, todo, run_id=dead, lease_seconds=3600)
    finally:
        con.close()
    fake_openai.default = Reply("status", status=500)
    assert extract(s).outcomes == {"failed:server_error": 1}
    assert rows(s.db, "select attempts from stage1_jobs") == [(1,)]
    fake_openai.default = Reply("ok")
    again = extract(s)
    assert again.decisions == {"take": 1}
    assert again.outcomes == {"succeeded": 1}
    assert rows(s.db, "select attempt, outcome from stage1_attempts order by attempt") == [
        (1, "failed"),
        (2, "succeeded"),
    ]


def test_a_refused_key_is_recorded_but_never_uses_up_the_retry_budget(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 3)
    s = settings(tmp_path, fake_openai, retry_delay_hours=0)
    ingest_archive(s)
    fake_openai.default = Reply("status", status=401)
    for _ in range(4):
        summary = extract(s)
        assert summary.decisions == {"take": 3}
        assert summary.outcomes == {"failed:auth_error": 3}
    assert rows(
        s.db, "select status, last_reason, attempts, count(*) from stage1_jobs group by all"
    ) == [("failed", "auth_error", 0, 3)]
    assert rows(s.db, "select count(*) from stage1_attempts where reason = 'auth_error'") == [(12,)]
    fake_openai.default = Reply("ok")
    assert extract(s).outcomes == {"succeeded": 3}


def test_an_endpoint_that_is_down_stops_the_run_and_leaves_the_rest_pending(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 40)
    ingest_archive(settings(tmp_path))
    s = settings(
        tmp_path, backend="openai", base_url=closed_port_url(), model="fake-model",
        max_retries=0, request_timeout_s=5, concurrency=2,
    )  # fmt: skip
    summary = extract(s)
    failed = summary.outcomes.get("failed:connection_error", 0)
    assert summary.outcomes == {"failed:connection_error": failed}
    assert 8 <= failed < 40 and summary.requests == failed
    assert summary.stopped is not None
    assert "8 requests in a row failed with connection_error" in summary.stopped
    assert f"{40 - failed} sessions left pending" in summary.stopped
    jobs = dict(rows(s.db, "select status, count(*) from stage1_jobs group by 1"))
    assert jobs.get("running", 0) == 0
    assert jobs == {"failed": failed, "pending": 40 - failed}
    assert rows(s.db, "select max(attempts) from stage1_jobs") == [(0,)]
    assert rows(s.db, "select status from runs where command = 'extract'") == [("succeeded",)]


def test_model_requests_count_only_requests_sent(
    tmp_path: Path, fake_openai: FakeOpenAI, archive_of_six: list[Path]
) -> None:
    # a window below the output reserve: every request is refused before it is sent
    s = settings(tmp_path, fake_openai, context_window=2000, retry_delay_hours=0)
    summary = extract(s)
    assert summary.outcomes == {"failed:context_overflow": 6}
    assert fake_openai.count() == 0 and summary.requests == 0
    assert extract(settings(tmp_path, fake_openai)).requests == 6 == fake_openai.count()


def test_a_long_session_in_a_small_window_is_sent_in_chunks_that_fit(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    calls = [(f"make step-{i}", "compiling module … ok\n" * 200) for i in range(40)]
    lines = codex_lines(uid(0), request="migrate the billing service", at=at, calls=calls)
    write_rollout(tmp_path / "archive", uid(0), lines, at)
    ingest_archive(settings(tmp_path))
    s = settings(tmp_path, fake_openai, context_window=9_000)
    assert extract(s).outcomes == {"succeeded": 1}
    texts = [last_user_text(sent["body"]) for sent in fake_openai.requests]
    assert len(texts) > 2 and not any("tokens truncated" in t for t in texts)
    assert all(f"make step-{i}" in "".join(texts) for i in range(40))
