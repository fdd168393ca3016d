"""A nightly ``memkiln run`` with nothing new in the archive does not start Prefect's
temporary API server (it costs more than the run); with something new, or against a running
Prefect server, the run goes through Prefect."""

from __future__ import annotations

from pathlib import Path

import pytest

from memkiln.flows.nothing_new import WITHOUT_PREFECT, prefect_worth_starting
from memkiln.pipeline.run import run_job
from memkiln.settings import Settings
from tests.commands import memkiln
from tests.imports import LIST_IMPORTS, orchestration_imported


def _stored(archive: Path, tmp_path: Path) -> Settings:
    settings = Settings(
        archive=archive, db=tmp_path / "m.duckdb", out=tmp_path / "memories",
        backfill=True, progress=False, prefect=False,
    )  # fmt: skip
    run_job(settings)  # the archive is stored: the next nightly run finds nothing new
    return settings.model_copy(update={"prefect": True})


def test_a_run_with_nothing_new_goes_without_prefect_and_says_so(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _stored(sample_archive, tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # Prefect's temporary server mode
    done = memkiln(
        "run", "--archive", str(sample_archive), "--db", str(settings.db),
        "--out", str(settings.out), "--no-progress", "--prefect", env=LIST_IMPORTS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert WITHOUT_PREFECT in " ".join(done.stdout.split())
    assert "prefect" not in orchestration_imported(done.stderr)  # no server, not even imported


def test_a_changed_file_or_a_running_prefect_server_makes_the_run_go_through_prefect(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _stored(sample_archive, tmp_path)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert not prefect_worth_starting(settings)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_worth_starting(settings)
    monkeypatch.delenv("PREFECT_API_URL")
    changed = next(iter(sorted(sample_archive.rglob("*.jsonl"))))
    with changed.open("a") as f:
        f.write("\n")
    assert prefect_worth_starting(settings)
