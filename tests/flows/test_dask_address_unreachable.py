"""A Dask scheduler address that nothing answers is a configuration error: one line and exit
code 2 before any work starts (no flow run, no run record, no tracebacks from Prefect's
loggers), as the README promises for every configuration error."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import duckdb
import pytest

from memkiln.errors import ConfigError
from memkiln.flows.task_runners import with_task_runner
from tests.commands import MEMKILN, clean_env


def closed_port() -> int:
    """A loopback port nothing listens on (bound for a moment, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_address_nothing_answers_is_refused_before_the_flow_is_set_up() -> None:
    address = f"tcp://127.0.0.1:{closed_port()}"
    with pytest.raises(
        ConfigError, match=re.escape(f"cannot reach the Dask scheduler at {address}")
    ):
        with_task_runner(object(), kind="dask", address=address)


def test_run_with_an_unreachable_dask_scheduler_is_one_line_and_exit_2_before_any_work(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    address = f"tcp://127.0.0.1:{closed_port()}"
    done = subprocess.run(
        [MEMKILN, "run", "--archive", str(sample_archive), "--db", str(db), "--out",
         str(tmp_path / "out"), "--backfill", "--no-progress", "--task-runner", "dask",
         "--dask-address", address],
        capture_output=True, text=True, env=clean_env(), timeout=240,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: cannot reach the Dask scheduler at {address}")
    if db.exists():  # the store may be created; no run was recorded in it
        with duckdb.connect(str(db), read_only=True) as con:
            assert con.execute("select count(*) from runs").fetchall() == [(0,)]


@pytest.mark.parametrize("command", ["extract", "backfill"])
def test_extract_and_backfill_run_their_tasks_on_the_configured_task_runner(
    command: str, sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    ingest = [MEMKILN, "ingest", "--archive", str(sample_archive), "--db", str(db),
              "--no-prefect", "--no-progress"]  # fmt: skip
    assert subprocess.run(ingest, capture_output=True, env=clean_env()).returncode == 0
    address = f"tcp://127.0.0.1:{closed_port()}"
    # set the way a nightly config sets it: the run must go to that scheduler, or say it
    # cannot reach it (as 'memkiln run' does), not run on threads in this process instead
    env = clean_env(MEMKILN_TASK_RUNNER="dask", MEMKILN_DASK_ADDRESS=address)
    args = [MEMKILN, command, "--db", str(db), "--no-progress"]
    if command == "backfill":
        args += ["--archive", str(sample_archive), "--out", str(tmp_path / "out")]
    else:
        args += ["--backfill"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith(f"error: cannot reach the Dask scheduler at {address}")
