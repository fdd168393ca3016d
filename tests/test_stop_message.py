"""The one line a stopped command prints says whether a run was recorded: a SIGTERM that
arrives before the run record is opened (while Prefect's temporary server starts, say)
changed nothing, and the line must not claim a record was closed."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import memkiln.cli as cli
import memkiln.io.run_records as run_records
import memkiln.io.store as store
from memkiln.errors import Interrupted


def stop(*_: object, **__: object) -> None:
    raise Interrupted(signal.SIGTERM, "SIGTERM")


def test_a_stop_before_any_run_record_says_nothing_was_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import memkiln.io.signals as signals

    monkeypatch.setattr(store, "_STARTED", [])
    monkeypatch.setattr(signals, "_starting", [])
    monkeypatch.setattr(cli, "_hold", stop)
    code = cli.run_cli(["extract", "--db", str(tmp_path / "m.duckdb"), "--no-prefect"])
    assert code == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip()
    assert line == "error: interrupted by SIGTERM before the run started: nothing was done"


def test_a_stop_after_a_run_record_says_the_record_was_closed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(store, "_STARTED", [])

    def record_then_stop(*_: object, **__: object) -> None:
        con = store.open_store(tmp_path / "m.duckdb")
        try:
            with run_records.recorded_run(con, command="extract"):
                stop()
        finally:
            con.close()

    monkeypatch.setattr(cli, "_hold", record_then_stop)
    code = cli.run_cli(["extract", "--db", str(tmp_path / "m.duckdb"), "--no-prefect"])
    assert code == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip()
    assert line == (
        "error: interrupted by SIGTERM: the run was stopped and its record closed as 'interrupted'"
    )


def test_a_stop_while_prefect_starts_says_so_and_that_nothing_was_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import memkiln.io.signals as signals

    monkeypatch.setattr(store, "_STARTED", [])
    monkeypatch.setattr(signals, "_starting", [])

    def start_prefect_then_stop(*_: object, **__: object) -> None:
        signals.starting("Prefect was starting (its temporary API server)")
        stop()

    monkeypatch.setattr(cli, "_hold", start_prefect_then_stop)
    code = cli.run_cli(["extract", "--db", str(tmp_path / "m.duckdb")])
    assert code == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip()
    assert line == (
        "error: interrupted by SIGTERM while Prefect was starting (its temporary API server), "
        "before the run began: nothing was done"
    )
