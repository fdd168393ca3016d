"""``memkiln status`` during a run shows what the running run has done so far (its counters
are written when it ends: it showed ``sessions 0`` while 51 were done)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memkiln.io.snapshot import publish
from memkiln.io.status import status_report
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
