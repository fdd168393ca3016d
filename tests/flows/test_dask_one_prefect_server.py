"""With ``--task-runner dask`` and Prefect's temporary server (no ``PREFECT_API_URL``), the
local cluster's workers report their task runs to the flow's server: none starts a Prefect
API server of its own (one per worker, on the same database, which outlives its worker when
the run is killed or the worker is killed by its nanny at the cluster's close)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil

from tests.commands import MEMKILN, clean_env

PREFECT_SERVER = "prefect.server.api.server:create_app"


def servers_under(workers: list[psutil.Process]) -> set[int]:
    found = set()
    for worker in workers:
        try:
            for child in worker.children(recursive=True):
                if PREFECT_SERVER in " ".join(child.cmdline()):
                    found.add(child.pid)
        except psutil.Error:
            continue
    return found


def test_the_workers_of_a_local_dask_cluster_start_no_prefect_server_of_their_own(
    sample_archive: Path, tmp_path: Path
) -> None:
    args = [MEMKILN, "run", "--archive", str(sample_archive), "--db", str(tmp_path / "m.duckdb"),
            "--out", str(tmp_path / "out"), "--backfill", "--no-progress", "--task-runner",
            "dask"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), start_new_session=True)  # fmt: skip
    me = psutil.Process(proc.pid)
    seen: set[int] = set()
    while proc.poll() is None:
        try:
            workers = [c for c in me.children() if "dask worker" in " ".join(c.cmdline())]
        except psutil.Error:
            break
        seen |= servers_under(workers)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert not seen, f"Prefect servers started by Dask workers: {sorted(seen)}"
