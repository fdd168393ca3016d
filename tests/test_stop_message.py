"""The one line a stopped command prints says whether a run was recorded: a SIGTERM that
arrives before the run record is opened (while Prefect's temporary server starts, say)
changed nothing, and the line must not claim a record was closed; one that arrives once the
command ended, while the process shuts down, says so."""

from __future__ import annotations

import signal
import subprocess
import sys
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


#: The console script's ``main`` with a command that ends at once (exit 0), and a stop that
#: arrives while the process shuts down (in a shutdown hook, as Prefect's take half a second).
_EXITING = (
    "import atexit, os, signal, sys, time\n"
    "import memkiln.cli as cli\n"
    "cli.run_cli = lambda: (print('memory files: INDEX.md'), 0)[1]\n"
    "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(10)))\n"
    "cli.main()\n"
)


def test_a_stop_while_the_process_exits_says_the_command_had_ended() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _EXITING], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 128 + signal.SIGTERM  # not killed without a word (-15)
    assert out.stdout.strip() == "memory files: INDEX.md"
    assert out.stderr.strip() == (
        "error: interrupted by SIGTERM while exiting: the command had already ended (exit 0); "
        "nothing it did was lost"
    )
