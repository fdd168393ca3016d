"""``memkiln status`` during a run shows what the running run has done so far (its counters
are written when it ends: it showed ``sessions 0`` while 51 were done)."""

from __future__ import annotations

import io
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from memkiln.io.snapshot import publish
from memkiln.io.status import print_status, status_report
from memkiln.io.store import linked_runs, open_store, start_run
from tests.sample_db import SampleDb, shared_sample_db


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def test_status_counts_the_sessions_a_running_run_has_done_so_far(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    shutil.copyfile(sample_db.db, db)
    con = open_store(db)
    try:
        parent = start_run(con, command="run")
        with linked_runs(parent_run_id=parent):
            phase = start_run(con, command="extract")
        at = datetime.now(UTC)
        for i, outcome in enumerate(["succeeded"] * 3 + ["succeeded_no_output", "failed"]):
            con.execute(
                "insert into stage1_attempts (run_id, rollout_id, attempt, outcome, backend, "
                "model, started_at, ended_at) values (?, ?, 1, ?, 'heuristic', 'h', ?, ?)",
                [phase, f"r{i}", outcome, at, at],
            )
        publish(con)
    finally:
        con.close()
    runs = status_report(db)["runs"]
    running = [r for r in runs if r["run_id"] == parent]
    assert running and running[0]["status"] == "running"
    got = running[0]
    assert (got["sessions_succeeded"], got["sessions_no_output"], got["sessions_failed"]) == (
        3,
        1,
        1,
    )
    # runs that ended keep the counters they recorded
    ended = [r for r in runs if r["status"] == "succeeded"]
    assert ended and all(r["sessions_succeeded"] >= 0 for r in ended)


def test_status_shows_a_running_runs_items_projects_and_cost_so_far(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    shutil.copyfile(sample_db.db, db)
    con = open_store(db)
    try:
        parent = start_run(con, command="run")
        with linked_runs(parent_run_id=parent):
            ingest = start_run(con, command="ingest")
            extract = start_run(con, command="extract")
        # the ingest phase stored two sessions of 10 and 32 items, extraction paid for two
        # attempts, and phase 2 wrote one project so far (each phase's counters come at its end)
        con.execute(
            "update rollouts set run_id = ? where rollout_id in "
            "(select rollout_id from rollouts order by rollout_id limit 2)",
            [ingest],
        )
        items = con.execute(
            "select sum(n_items) from rollouts where run_id = ?", [ingest]
        ).fetchall()[0][0]
        at = datetime.now(UTC)
        for i, cost in enumerate([0.25, 0.5]):
            con.execute(
                "insert into stage1_attempts (run_id, rollout_id, attempt, outcome, backend, "
                "model, cost_usd, started_at, ended_at) "
                "values (?, ?, 1, 'succeeded', 'openai', 'm', ?, ?, ?)",
                [extract, f"r{i}", cost, at, at],
            )
        con.execute(
            "update consolidation_jobs set status = 'succeeded', last_success_at = ?, "
            "updated_at = ? where project_key = (select min(project_key) from consolidation_jobs)",
            [at, at],
        )
        publish(con)
    finally:
        con.close()
    report = status_report(db)
    (got,) = [r for r in report["runs"] if r["run_id"] == parent]
    assert got["status"] == "running"
    assert got["items"] == items > 0
    assert got["projects_written"] == 1
    assert got["cost_usd"] == 0.75
    # and the table a person reads says so
    out = io.StringIO()
    print_status(report, Console(file=out, width=200))
    row = next(line for line in out.getvalue().splitlines() if parent[:12] in line)
    assert "running" in row and f"{items:,}" in row and "0.7500" in row
