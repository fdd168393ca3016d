"""A run with a model, stopped by SIGTERM while its requests are in flight under Prefect's
default thread runner: the process exits on its own, with its one line and no traceback,
and sends the model nothing more (a chunked session's merge is never asked for)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import duckdb
import pytest

from tests.commands import MEMKILN, alive, clean_env, runs, start, stop_when
from tests.fake_openai import FakeOpenAI, last_user_text
from tests.timeouts import LONG_TIMEOUT_S

STOPPED_LINE = (
    "error: interrupted by SIGTERM: the run was stopped and its record closed as 'interrupted'"
)
MERGE_START = "Below are the memories extracted from the parts"

# Each test ingests, starts a run (a local Dask cluster in one) and stops it: at a load average
# of 40 on 2 cores that took 419 s once, past the suite's 300 s limit for a test. The stop
# itself is still held to EXIT_TIMEOUT (60 s) by stop_when.
pytestmark = pytest.mark.timeout(LONG_TIMEOUT_S)


def ingested(archive: Path, db: Path) -> None:
    done = subprocess.run(
        [MEMKILN, "ingest", "--archive", str(archive), "--db", str(db), "--no-prefect",
         "--no-progress"],
        capture_output=True, text=True, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def extract_args(db: Path, base_url: str, *more: str) -> tuple[str, ...]:
    return ("extract", "--db", str(db), "--backfill", "--no-progress", "--backend", "openai",
            "--base-url", base_url, *more)  # fmt: skip


def assert_stopped_at_once(proc: subprocess.Popen[str], err: str, children: list) -> None:
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    # not "not stopped after 30 s, exiting now": the process ended by itself
    assert err.strip().splitlines()[-1] == STOPPED_LINE, err
    assert not alive(children), "a child of the stopped run is still alive"


def test_sigterm_while_slow_requests_are_in_flight_under_prefect_exits_without_the_grace_timer(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    ingested(sample_archive, db)
    # answers slower than the 30 s a stopped run is given: the process must not wait for them
    with FakeOpenAI(latency=45.0) as fake:
        proc = start(*extract_args(db, fake.base_url, "--concurrency", "4"))
        children, err = stop_when(proc, lambda _: fake.count() > 0, group=False)
    assert_stopped_at_once(proc, err, children)
    assert dict(runs(db))["extract"] == "interrupted"
    with duckdb.connect(str(db), read_only=True) as con:
        held = con.execute("select count(*) from stage1_jobs where status = 'running'").fetchall()
    assert held == [(0,)]


def test_a_stopped_run_sends_no_merge_for_the_chunked_sessions_it_had_in_flight(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    ingested(sample_archive, db)
    # a small window: several sample sessions go in chunks, whose merge follows their answers
    with FakeOpenAI(latency=3.0) as fake:
        args = extract_args(db, fake.base_url, "--context-window", "12000")
        proc = start(*args)
        children, err = stop_when(proc, lambda _: fake.count() > 0, group=False)
        asked = [last_user_text(r["body"]) for r in list(fake.requests)]
    assert_stopped_at_once(proc, err, children)
    assert not [text for text in asked if text.startswith(MERGE_START)]
    with duckdb.connect(str(db), read_only=True) as con:
        held = con.execute("select count(*) from stage1_jobs where status = 'running'").fetchall()
        attempts = con.execute("select count(*) from stage1_attempts").fetchall()
    assert held == [(0,)]
    assert attempts == [(0,)]  # nothing in flight was recorded after the stop


def test_on_a_local_dask_cluster_a_stopped_run_ends_its_calls_and_says_one_line(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    ingested(sample_archive, db)
    with FakeOpenAI(latency=3.0) as fake:
        args = extract_args(db, fake.base_url, "--context-window", "12000")
        # 'extract' has no --task-runner: 'run' over the ingested archive goes straight on
        proc = start("run", "--archive", str(sample_archive), "--out", str(tmp_path / "out"),
                     "--task-runner", "dask", *args[1:])  # fmt: skip
        children, err = stop_when(proc, lambda _: fake.count() > 0, group=False)
        asked = [last_user_text(r["body"]) for r in list(fake.requests)]
    # the workers' calls end with the run: Dask reports no task cancelled under it and
    # no worker killed by its nanny, and no chunked session's merge is asked for
    assert err.strip().splitlines() == [STOPPED_LINE], (proc.returncode, err)
    assert_stopped_at_once(proc, err, children)
    assert not [text for text in asked if text.startswith(MERGE_START)]
