"""Where a run's time goes before and around its work: Prefect's start-up against a no-op
nightly run (nothing new in the archive), with and without Prefect.

Each step runs in a fresh process, as a scheduler starts one; wall time and CPU time (the
process and the children it waited for: Prefect's temporary API server) are measured from
outside. Steps:

- ``import memkiln.cli``, ``import prefect``, ``import prefect.server.api.server``: imports;
- ``ephemeral server``: Prefect's temporary API server (``SubprocessASGIServer``) started
  and stopped, with nothing run on it (on a database already migrated);
- ``trivial flow``: one flow run with one task on the temporary server (server included);
- ``nightly --no-prefect`` / ``nightly (Prefect)``: ``memkiln run`` on the sample archive
  after a first run has stored it, so nothing is new (the no-op nightly run);
- ``nightly (Prefect, server up)``: the same against an already running ``prefect server``
  (``PREFECT_API_URL``), when ``--with-server`` is given.

Run from the repository root:

    python bench/startup.py                  # 3 rounds
    python bench/startup.py --rounds 5 --with-server
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MEMKILN = str(Path(sys.executable).with_name("memkiln"))
SAMPLE = REPO / "data" / "sample-archive"

TRIVIAL_FLOW = """
from prefect import flow, task
@task
def one() -> int:
    return 1
@flow
def trivial() -> int:
    return one()
trivial()
"""
SERVER_ONLY = """
from prefect.server.api.server import SubprocessASGIServer
server = SubprocessASGIServer()
server.start(timeout=90)
server.stop()
"""


def measure(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and its waited-for children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--with-server", action="store_true", help="also against prefect server")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memkiln-startup-", dir="/dev/shm"))
    try:
        shutil.copytree(SAMPLE, work / "archive")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMKILN_", "PREFECT_"))}
        env |= {"MEMKILN_HOME": str(work / "home"), "PREFECT_HOME": str(work / "home" / "p")}
        env |= {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
        run = [MEMKILN, "run", "--archive", "archive", "--db", "m.duckdb", "--out", "mem"]
        # the first run stores the archive and migrates Prefect's database: not measured
        measure([*run, "--backfill", "--no-progress"], env, work)
        steps: dict[str, list[str]] = {
            "import memkiln.cli": [PYTHON, "-c", "import memkiln.cli"],
            "import prefect": [PYTHON, "-c", "import prefect"],
            "import prefect.server.api.server": [
                PYTHON, "-c", "import prefect.server.api.server",
            ],
            "ephemeral server (start, stop)": [PYTHON, "-c", SERVER_ONLY],
            "trivial flow, 1 task (server incl.)": [PYTHON, "-c", TRIVIAL_FLOW],
            "nightly --no-prefect": [*run, "--no-progress", "--no-prefect"],
            "nightly (Prefect)": [*run, "--no-progress"],
        }  # fmt: skip
        server = None
        if args.with_server:
            port = free_port()
            prefect = str(Path(PYTHON).with_name("prefect"))
            server = subprocess.Popen(
                [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port),
                 "--no-ui"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}/api"
            import httpx

            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("prefect server did not start")
                time.sleep(0.5)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
        if server is not None:
            results["nightly (Prefect, server up)"] = []
        try:
            for _ in range(args.rounds):
                for name, argv in steps.items():
                    results[name].append(measure(argv, env, work))
                if server is not None:
                    up = env | {"PREFECT_API_URL": url}
                    results["nightly (Prefect, server up)"].append(
                        measure([*run, "--no-progress"], up, work)
                    )
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
        load = os.getloadavg()[0]
        print(f"{args.rounds} rounds, median (min-max); load average at the end {load:.1f}, "
              f"{os.cpu_count()} cores")  # fmt: skip
        print(f"| {'step':<38} | {'wall s':>18} | {'CPU s':>18} |")
        print(f"|{'-' * 40}|{'-' * 20}|{'-' * 20}|")
        for name, got in results.items():
            walls = [w for w, _ in got]
            cpus = [c for _, c in got]
            wall = f"{statistics.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f})"
            cpu = f"{statistics.median(cpus):.1f} ({min(cpus):.1f}-{max(cpus):.1f})"
            print(f"| {name:<38} | {wall:>18} | {cpu:>18} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
