"""An error inside a phase surfaces as itself, with the store and the run record closed; a
backfill to the last representable day runs; a backfill window that ends before it starts
is a usage error."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb
import pytest

from memkiln.pipeline import extract as plain_extract
from memkiln.pipeline.backfill import backfill_job
from memkiln.settings import Settings
from tests.builders import make_archive
from tests.commands import memkiln, one_line_error


def settings_for(tmp_path: Path, **kw: object) -> Settings:
    archive = tmp_path / "archive"
    if not archive.exists():
        make_archive(archive, 2)
    return Settings(
        archive=archive, db=tmp_path / "m.duckdb", out=tmp_path / "out", prefect=False,
        progress=False, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def runs(db: Path) -> dict[str, str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("select command, status from runs").fetchall())


def test_a_backfill_until_the_last_day_a_date_can_hold_runs(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, until=date(9999, 12, 31))
    summary = backfill_job(settings)
    assert summary.extract.sessions_failed == 0
    assert runs(settings.db)["backfill"] == "succeeded"
    assert list(settings.out.glob("*/MEMORY.md"))


def test_an_error_inside_a_phase_surfaces_as_itself_and_closes_the_store_and_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_policy(settings: Settings) -> object:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(plain_extract, "policy_from", broken_policy)
    settings = settings_for(tmp_path)

    with pytest.raises(OverflowError, match="date value out of range"):
        backfill_job(settings)

    statuses = runs(settings.db)  # the store can be opened: nobody holds it
    assert statuses["backfill"] == "failed"
    assert "running" not in statuses.values()


def test_a_backfill_whose_since_is_after_its_until_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 1)
    result = memkiln(
        "backfill", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--since", "2026-05-01", "--until", "2026-01-01", "--no-prefect",
    )  # fmt: skip
    one_line_error(result, "since (2026-05-01) is after until (2026-01-01)")
    assert not (tmp_path / "m.duckdb").exists()
