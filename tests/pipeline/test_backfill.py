"""Backfill: every session reached, every session accounted for, the cost known before and
capped during. In-process (``--no-prefect`` code paths) on small archives, and through the
console script where the user's view matters."""

from __future__ import annotations

import json
import math
import shutil
import threading
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import pytest

from memkiln.errors import ConfigError
from memkiln.io.jobs import selection_reasons
from memkiln.io.store import fetch_pl, open_store, sql
from memkiln.pipeline.backfill import backfill_job
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.pipeline.run import run_job
from memkiln.settings import Settings
from memkiln.transforms.tokens import count_tokens
from tests.builders import codex_lines, make_archive, uid, write_rollout
from tests.commands import memkiln
from tests.fake_openai import FakeOpenAI

PRICES = {"fake-model": (1.0, 4.0)}  # USD per million tokens, in and out


def settings(tmp_path: Path, fake: FakeOpenAI | None = None, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "out": tmp_path / "memories",
        "min_rollout_idle_hours": 0,
        "progress": False,
        "prefect": False,
    }
    if fake is not None:
        base |= {
            "backend": "openai",
            "base_url": fake.base_url,
            "model": "fake-model",
            "max_retries": 0,
            "request_timeout_s": 10,
            "prices": PRICES,
        }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def done_sessions(db: Path) -> int:
    query = "select count(*) from stage1_jobs where status in ('succeeded', 'succeeded_no_output')"
    return int(rows(db, query)[0][0])  # type: ignore[arg-type]


def test_repeated_backfill_runs_reach_every_session_within_ceil_eligible_over_the_limit(
    tmp_path: Path,
) -> None:
    # a scan limit below the archive's size starved the older sessions before
    make_archive(tmp_path / "archive", 45)
    s = settings(tmp_path, backfill=True, max_rollouts_per_run=20)
    done = []
    for _ in range(math.ceil(45 / 20)):
        run_job(s)
        done.append(done_sessions(s.db))
    assert done == [20, 40, 45]
    again = run_job(s)
    assert again.extract.taken == 0
    assert again.extract.decisions == {"up_to_date": 45}


def test_one_backfill_extracts_every_session_of_its_date_range_in_rounds(
    tmp_path: Path,
) -> None:
    # 60 sessions one hour apart from 2026-10-01 09:00 UTC: 15 on the 1st, 24 on the 2nd, ...
    make_archive(tmp_path / "archive", 60, start=datetime(2026, 10, 1, 9, 0, tzinfo=UTC))
    s = settings(
        tmp_path, max_rollouts_per_run=10, since=date(2026, 10, 2), until=date(2026, 10, 2)
    )
    summary = backfill_job(s)
    assert len(summary.rounds) == 3  # 10 + 10 + 4 sessions
    assert done_sessions(s.db) == 24
    reasons = dict(((d, r), n) for d, r, n in selection_reasons_of(s.db))
    assert reasons[("skip", "outside_range")] == 36
    assert reasons[("skip", "up_to_date")] == 20  # the decisions of the last batch
    assert reasons[("take", "selected")] == 4
    assert (tmp_path / "memories" / "INDEX.md").is_file()
    # the whole archive, without the nightly age window; resumable: only the rest is done
    full = backfill_job(settings(tmp_path, max_rollouts_per_run=50))
    assert sum(b.taken for b in full.rounds) == 36
    assert done_sessions(s.db) == 60


def selection_reasons_of(db: Path) -> list[tuple[str, str, int]]:
    con = open_store(db, read_only=True)
    try:
        return selection_reasons(con)
    finally:
        con.close()


def test_a_session_without_remote_or_cwd_lands_in_the_unknown_project_folder(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    lines = codex_lines(uid(1), request="Always use ruff, never black.", at=at, remote=None)
    del lines[0]["payload"]["cwd"]
    write_rollout(archive, uid(1), lines, at)
    s = settings(tmp_path, backfill=True)
    run_job(s)
    assert rows(s.db, "select project_key from rollouts") == [(None,)]
    folders = [p.name for p in (tmp_path / "memories").iterdir() if p.is_dir()]
    assert len(folders) == 1 and folders[0].startswith("unknown-project")
    assert (tmp_path / "memories" / folders[0] / "memory_summary.md").is_file()
    assert "unknown-project" in (tmp_path / "memories" / "INDEX.md").read_text()


def explain(db: Path) -> dict[str | None, str]:
    con = open_store(db, read_only=True)
    try:
        frame = fetch_pl(con, sql("sessions_without_memory"))
    finally:
        con.close()
    return dict(frame.select("rollout_id", "reason").iter_rows())


def test_sql_explains_every_sample_session_that_has_no_memory(
    tmp_path: Path, sample_archive: Path
) -> None:
    s = settings(tmp_path, archive=sample_archive)
    backfill_job(s)
    sessions = {r[0] for r in rows(s.db, "select rollout_id from rollouts")}
    in_memory = {
        r[0]
        for r in rows(
            s.db,
            "select unnest(selected_ids) from consolidation_jobs where status = 'succeeded'",
        )
    }
    missing = explain(s.db)
    assert sessions - in_memory == {rid for rid in missing if rid is not None}
    assert all(reason for reason in missing.values())
    assert "subagent" in missing.values() or "no_user_message" in missing.values()


@pytest.mark.corpus
def test_sql_explains_every_corpus_session_that_has_no_memory(
    tmp_path: Path, ingested_corpus: Path
) -> None:
    # a copy of the shared ingest of the corpus: the backfill's own ingest finds every file
    # unchanged, then it extracts and consolidates them all
    shutil.copy2(ingested_corpus / "m.duckdb", tmp_path / "m.duckdb")
    s = settings(tmp_path, archive=ingested_corpus / "corpus")
    backfill_job(s)
    sessions = {r[0] for r in rows(s.db, "select rollout_id from rollouts")}
    in_memory = {
        r[0]
        for r in rows(
            s.db,
            "select unnest(selected_ids) from consolidation_jobs where status = 'succeeded'",
        )
    }
    missing = explain(s.db)
    assert sessions - in_memory == {rid for rid in missing if rid is not None}
    assert all(reason for reason in missing.values()), missing
    files = rows(s.db, "select count(*) from files where rollout_id is null")[0][0]
    assert sum(1 for rid in missing if rid is None) >= files  # type: ignore[operator]


def test_a_dry_run_sends_nothing_and_its_input_estimate_is_what_the_server_then_receives(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 12)
    fake_openai.token_counter = count_tokens
    dry = settings(tmp_path, fake_openai, backfill=True, dry_run=True)
    ingest_archive(dry)
    estimate = extract_store(dry).estimate
    assert estimate is not None
    assert fake_openai.count() == 0
    assert (estimate.sessions_found, estimate.sessions_to_do) == (12, 12)
    real = extract_store(settings(tmp_path, fake_openai, backfill=True))
    assert real.requests == fake_openai.count() == 12
    received = fake_openai.input_tokens_received
    assert abs(estimate.input_tokens - received) <= 0.10 * received
    (cost,) = rows(dry.db, "select cost_usd from run_estimates")[0]
    assert cost == pytest.approx(estimate.cost_usd)
    usage = rows(dry.db, "select kind, phase, requests from model_usage order by kind")
    assert usage == [("actual", "extract", 12), ("estimate", "extract", 12)]


def test_the_dry_run_expects_the_output_of_past_answers_and_shows_the_default_beside_it(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.token_counter = count_tokens
    make_archive(tmp_path / "archive", 8)
    s = settings(tmp_path, fake_openai, backfill=True)
    first = backfill_job(s.model_copy(update={"dry_run": True}))
    assert first.estimate is not None
    assert first.estimate.output_basis["extract"].past_mean is None  # the default, said so
    assert "the default" in first.estimate.output_basis["extract"].shown()
    done = run_job(s)
    # eight more sessions: the dry run expects what the eight answers used, per request
    make_archive(tmp_path / "more", 8, start=datetime(2026, 11, 1, 9, 0, tzinfo=UTC))
    for path in (tmp_path / "more").rglob("*.jsonl"):
        shutil.move(path, tmp_path / "archive" / path.name)
    shown = memkiln(
        "backfill", "--archive", str(tmp_path / "archive"), "--db", str(s.db), "--backend",
        "openai", "--base-url", fake_openai.base_url, "--model", "fake-model",
        "--min-idle-hours", "0", "--no-progress", "--no-prefect", "--dry-run", "--json",
        env={"MEMKILN_PRICES": json.dumps(PRICES)},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    basis = json.loads(shown.stdout)["output_tokens_per_request"]
    mean = done.extract.output_tokens / done.extract.requests
    assert basis["extract"]["answers"] == 8 and basis["extract"]["default"] == 700
    assert basis["extract"]["past_mean"] == pytest.approx(mean)
    assert basis["extract"]["per_request"] == round(mean)
    assert basis["consolidate"]["answers"] == 1  # phase 2's one request
    later = run_job(s)
    estimated = json.loads(shown.stdout)["per_model"][1]
    assert estimated["phase"] == "extract"
    spent = later.extract.output_tokens
    assert abs(estimated["output_tokens"] - spent) <= 0.25 * spent


def test_a_budget_of_half_the_estimate_stops_then_the_next_run_finishes(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 20)
    fake_openai.token_counter = count_tokens
    s = settings(tmp_path, fake_openai, backfill=True, concurrency=2)
    estimate = run_job(s.model_copy(update={"dry_run": True})).estimate
    assert estimate is not None and estimate.cost_usd
    budget = estimate.cost_usd / 2
    first = run_job(s.model_copy(update={"budget_usd": budget}))
    assert first.extract.budget_reached
    assert "budget" in (first.extract.stopped or "")
    spent = first.extract.cost_usd + first.consolidate.cost_usd
    assert spent <= budget  # a hard cap: what was in flight was reserved at its worst
    assert first.extract.taken > 0 and done_sessions(s.db) < 20
    second = run_job(s)
    assert done_sessions(s.db) == 20
    assert second.extract.outcomes == {"succeeded": 20 - done_before(first)}


class Gate:
    """Holds every answer until ``n`` requests are in flight together (or, when fewer come,
    until ``patience`` seconds passed with nothing more arriving): a run that sends
    requests without counting those in flight sends ``n`` before any answer comes."""

    def __init__(self, n: int, patience: float = 1.0) -> None:
        self.n, self.patience = n, patience
        self.cond = threading.Condition()
        self.generation = self.waiting = self.most = 0

    def __call__(self, body: dict) -> None:  # type: ignore[type-arg]
        with self.cond:
            generation = self.generation
            self.waiting += 1
            self.most = max(self.most, self.waiting)
            if self.waiting < self.n:
                self.cond.wait_for(lambda: self.generation != generation, self.patience)
            if self.generation == generation:  # the last to come, or nothing more came
                self.generation += 1
                self.waiting = 0
                self.cond.notify_all()


def test_with_answers_held_until_every_slot_is_in_flight_the_spend_never_passes_the_budget(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    # the answers wait until 8 requests are in flight: a run that does not count what is in
    # flight against the budget sends 8 before any is paid for; the answers (454-489 output
    # tokens) come close to the most a request may ask for, so that 8 of them pass the budget
    make_archive(tmp_path / "archive", 16)
    fake_openai.token_counter = count_tokens
    s = settings(tmp_path, fake_openai, backfill=True, concurrency=8, max_output_tokens=500)
    ingest_archive(s)
    estimate = extract_store(s.model_copy(update={"dry_run": True})).estimate
    assert estimate is not None and estimate.cost_usd
    budget = estimate.cost_usd / 2
    gate = Gate(8)
    fake_openai.route(gate)
    first = extract_store(s.model_copy(update={"budget_usd": budget}))
    assert first.budget_reached and first.cost_usd <= budget
    assert 0 < first.outcomes["succeeded"] < 16
    assert first.reserved_usd <= budget
    # the next run without a budget finishes the rest
    second = extract_store(s)
    assert second.outcomes == {"succeeded": 16 - first.outcomes["succeeded"]}


def done_before(summary: object) -> int:
    outcomes = summary.extract.outcomes  # type: ignore[attr-defined]
    return int(outcomes.get("succeeded", 0) + outcomes.get("succeeded_no_output", 0))


def test_phase_two_tokens_and_cost_are_recorded_per_run_and_model(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 3)
    s = settings(tmp_path, fake_openai, backfill=True)
    summary = run_job(s)
    assert summary.consolidate.requests == 1
    usage = rows(
        s.db,
        "select phase, model, requests, input_tokens > 0, cost_usd > 0 from model_usage "
        "where kind = 'actual' order by phase",
    )
    assert usage == [
        ("consolidate", "fake-model", 1, True, True),
        ("extract", "fake-model", 3, True, True),
    ]
    (total,) = rows(s.db, f"select cost_usd from runs where run_id = '{summary.run_id}'")[0]
    assert total == pytest.approx(summary.extract.cost_usd + summary.consolidate.cost_usd)


def test_a_model_without_a_price_is_an_error_with_a_budget_and_price_unknown_without(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 2)
    s = settings(tmp_path, fake_openai, backfill=True, prices={})
    with pytest.raises(ConfigError, match="price of model 'fake-model' is unknown"):
        run_job(s.model_copy(update={"budget_usd": 1.0}))
    summary = run_job(s)
    assert not summary.extract.price_known
    costs = rows(s.db, "select distinct cost_usd from model_usage where kind = 'actual'")
    assert costs == [(None,)]
    (run_cost,) = rows(s.db, f"select cost_usd from runs where run_id = '{summary.run_id}'")[0]
    assert run_cost is None


def test_the_backfill_command_dry_runs_as_json_then_backfills(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 5)
    common = [
        "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--out", str(tmp_path / "memories"), "--backend", "openai", "--base-url",
        fake_openai.base_url, "--model", "gpt-4.1-mini", "--min-idle-hours", "0",
        "--no-progress", "--no-prefect",
    ]  # fmt: skip
    dry = memkiln("backfill", *common, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    shown = json.loads(dry.stdout)
    assert shown["sessions_to_do"] == 5 and shown["input_tokens"] > 0
    assert shown["output_tokens"] > 0 and shown["cost_usd"] > 0  # gpt-4.1-mini: genai-prices
    assert fake_openai.count() == 0
    real = memkiln("backfill", *common, "--budget-usd", "5")
    assert real.returncode == 0, real.stderr
    assert "memkiln extract" in real.stdout
    assert fake_openai.count("/chat/completions") == 6  # 5 sessions, 1 project


def test_a_dry_run_of_the_openai_backend_needs_no_key_and_prints_no_prefect_warning(
    tmp_path: Path,
) -> None:
    # planning a backfill's cost comes before having a key; --no-prefect with a MEMKILN_HOME
    # whose folder does not exist yet printed Prefect's "Failed to create the Prefect home"
    make_archive(tmp_path / "archive", 3)
    env = {"OPENAI_API_KEY": "", "MEMKILN_HOME": str(tmp_path / "not" / "yet")}
    dry = memkiln(
        "backfill", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--out", str(tmp_path / "memories"), "--backend", "openai", "--model", "gpt-4.1-mini",
        "--min-idle-hours", "0", "--no-progress", "--no-prefect", "--dry-run", "--json",
        env=env,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["sessions_to_do"] == 3
    assert "Prefect home" not in dry.stderr
    # the real run still needs the key
    real = memkiln(
        "backfill", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--backend", "openai", "--no-prefect", env=env,
    )  # fmt: skip
    assert real.returncode == 2 and "OPENAI_API_KEY" in real.stderr
