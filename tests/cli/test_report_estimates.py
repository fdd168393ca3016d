"""The report sets each dry run's estimate beside what the next run of the same command did
and spent (report_estimates.sql)."""

from __future__ import annotations

import shutil
from pathlib import Path

from memkiln.cli import run_cli
from memkiln.io.analytics import connect_read_only, frames
from tests.sample_db import SAMPLE_ARCHIVE


def test_a_dry_run_is_shown_beside_the_run_that_followed_it(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, archive)
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    common = ["--archive", str(archive), "--db", str(db), "--out", str(out), "--backfill"]
    common += ["--no-prefect", "--no-progress"]
    assert run_cli(["run", *common, "--dry-run"]) == 0
    assert run_cli(["run", *common]) == 0
    assert run_cli(["run", *common, "--dry-run"]) == 0  # nothing ran after this one yet
    con = connect_read_only(db)
    try:
        answers = frames(con)
    finally:
        con.close()
    estimates = answers.estimates.to_dicts()
    assert [e["command"] for e in estimates] == ["run", "run"]
    latest, first = estimates
    assert latest["ran_at"] is None and latest["sessions_to_do"] == 0
    assert first["ran_at"] > first["estimated_at"] and first["run_status"] == "succeeded"
    # the sample's six eligible sessions: estimated, then done; its three projects with a
    # memory written (the estimate counts projects that may get one)
    assert first["sessions_to_do"] == first["sessions_done"] == 6
    assert first["projects_written"] == 3 <= first["projects_with_sessions_to_do"]
    assert first["model_requests"] == first["estimated_model_requests"] == 0  # the heuristic
    # the banner names the latest, a dry run
    banner = answers.banner.row(0, named=True)
    assert banner["dry_run"] and banner["status"] == "succeeded"
    history = answers.run_history
    assert history["dry_run"].to_list() == [True, False, True]
