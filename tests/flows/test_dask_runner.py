"""Runs on Dask (``--task-runner dask``) give what the default runner gives, and leave no
process behind. The ``memkiln`` console script runs the whole job, as a user runs it.

Cheap on purpose (these were the suite's two slowest tests): each run starts Prefect's
temporary server and Dask's processes, so there are as few runs as what they check needs:
the Dask run starts its own local cluster, whose workers record the tasks they ran
(``dask_recorder.py``), and the same run shows that its cluster ends with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from functools import partial
from pathlib import Path

import duckdb
import pytest

from memkiln.flows.task_runners import LOCAL_DASK_WORKERS
from tests import commands
from tests.commands import MEMKILN

#: Columns that name a run, a process or the wall-clock time of this run (not the data).
RUN_COLUMNS = {
    "run_id",
    "parent_run_id",
    "flow_run_id",
    "last_run_id",
    "pid",
    "owner",
    "lease_until",
    "first_seen_at",
    "last_ingest_at",
    "ingested_at",
    "detected_at",
    "decided_at",
    "created_at",
    "applied_at",
    "last_success_at",
    "retry_at",
}
#: Tables whose started_at / ended_at / updated_at are the run's clock, not a session's.
CLOCKED = {"runs", "stage1_attempts", "stage1_jobs", "consolidation_jobs", "stage1_batches"}
#: Bytes per ingest batch: the sample archive (~0.5 MB) makes several batches.
SMALL_BATCH = 64 * 1024
#: Records the tasks each Dask worker process runs (a worker preload).
RECORDER = Path(__file__).with_name("dask_recorder.py")


#: a Dask cluster starts slowly on a loaded machine
memkiln = partial(commands.memkiln, timeout=600)


def table_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows, sorted, without the columns that identify the run."""
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [t for (t,) in con.sql("select table_name from duckdb_tables()").fetchall()]
        for table in sorted(tables):
            columns = [
                c
                for (c,) in con.execute(
                    "select column_name from duckdb_columns() where table_name = $t "
                    "order by column_index",
                    {"t": table},
                ).fetchall()
                if c not in RUN_COLUMNS
                and not (table in CLOCKED and c in ("started_at", "ended_at", "updated_at"))
                and not (table == "schema_migrations" and c == "applied_at")
            ]
            listed = ", ".join(f'"{c}"' for c in columns)
            out[table] = sorted(
                con.sql(f"select {listed} from {table}").fetchall(),  # names from the catalog
                key=repr,
            )
    return out


def memory_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def run_job(
    archive: Path, db: Path, out: Path, *extra: str, env: dict[str, str] | None = None
) -> None:
    result = memkiln(
        "run",
        "--archive",
        str(archive),
        "--db",
        str(db),
        "--out",
        str(out),
        "--backfill",
        "--sources",
        "cli,vscode,exec,mcp,unknown",
        "--no-progress",
        # several batches, and the sessions in two chunks (the first fills the slots):
        # several tasks of each kind
        "--concurrency",
        "2",
        *extra,
        env={"MEMKILN_BATCH_BYTES": str(SMALL_BATCH), **(env or {})},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.timeout(900)  # two whole runs and a cluster; minutes on a loaded machine
# both runs (and the cluster's workers) talk to the test process's Prefect server: without
# PREFECT_API_URL each run, and each Dask worker, starts a temporary server of its own, about
# 4.5 CPU-s apiece, which is not what this test is about (the test below keeps them)
@pytest.mark.prefect_server
def test_a_run_on_a_local_dask_cluster_gives_the_rows_and_files_of_the_default_runner(
    sample_archive: Path, tmp_path: Path
) -> None:
    pytest.importorskip("distributed")
    run_job(sample_archive, tmp_path / "thread.duckdb", tmp_path / "thread-out")
    marker = f"SCALE_TEST_MARK={uuid.uuid4().hex}"
    key, value = marker.split("=")
    record = tmp_path / "dask-tasks.txt"
    run_job(
        sample_archive,
        tmp_path / "dask.duckdb",
        tmp_path / "dask-out",
        "--task-runner",
        "dask",
        env={
            key: value,
            "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(RECORDER)]),
            "RECORD_DASK_TASKS": str(record),
        },
    )
    # the run's local cluster ended with it: no process of the run is left
    assert _marked(marker) == []
    # the batches, the sessions (rendered and extracted) and the projects were tasks on the
    # cluster's worker processes, not in the run's own process
    ran = [line.split() for line in record.read_text().splitlines()]
    tasks = {prefix for _, prefix in ran}
    assert {"prepare_task", "render_sessions_task", "render_task"} <= tasks, ran
    assert sum(prefix == "render_sessions_task" for _, prefix in ran) >= 2, ran
    assert len({pid for pid, _ in ran}) == LOCAL_DASK_WORKERS >= 2, ran
    thread_rows = table_rows(tmp_path / "thread.duckdb")
    dask_rows = table_rows(tmp_path / "dask.duckdb")
    assert thread_rows["items"] and thread_rows["stage1_outputs"]
    for table, rows in thread_rows.items():
        assert dask_rows[table] == rows, table
    files = memory_files(tmp_path / "thread-out")
    assert any(name.endswith("memory_summary.md") for name in files)
    assert memory_files(tmp_path / "dask-out") == files


def _marked(marker: str) -> list[int]:
    """Processes of this user whose environment holds ``marker`` (inherited from a run)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.timeout(900)
def test_a_local_dask_cluster_ends_when_the_run_is_stopped(
    sample_archive: Path, tmp_path: Path
) -> None:
    """(That it ends with a run that finishes: the test above.)"""
    pytest.importorskip("distributed")
    marker = f"SCALE_TEST_MARK={uuid.uuid4().hex}"
    key, value = marker.split("=")
    # stopped while its cluster runs (many small batches of ten copies of the archive keep
    # it busy): the workers end with it
    big = tmp_path / "big"
    for i in range(10):
        shutil.copytree(sample_archive, big / f"copy{i}")
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_") or k == "MEMKILN_HOME"
    }
    proc = subprocess.Popen(
        [
            MEMKILN,
            "ingest",
            "--archive",
            str(big),
            "--db",
            str(tmp_path / "b.duckdb"),
            "--no-progress",
            "--task-runner",
            "dask",
        ],
        env={**base, key: value, "MEMKILN_BATCH_BYTES": str(SMALL_BATCH // 4)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        expected = 2 + LOCAL_DASK_WORKERS  # this run, its Prefect server, its workers
        while (
            time.monotonic() < deadline and len(_marked(marker)) < expected and proc.poll() is None
        ):
            time.sleep(0.2)
        running = len(_marked(marker))
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
        assert running >= expected
        assert proc.returncode != 0  # stopped, not finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = time.monotonic() + 30
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _marked(marker) == []
