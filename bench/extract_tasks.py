"""Benchmark: what Prefect tasks cost extraction (issue 17, build point 1).

Run from the repository root:

    python bench/extract_tasks.py [--sessions 500] [--latency 0.5] [--noop 200]

Each measurement runs in a child process of its own (its own Prefect temporary server, its
own CPU accounting), on a copy of the same ingested store:

* ``noop N``: a flow that submits N empty tasks on the thread runner, minus the same flow
  with none: Prefect's own cost per task (wall, and CPU of the flow's process and of the
  temporary API server).
* ``heuristic`` on the bundled sample archive and on ``--sessions`` tiny sessions: the
  extraction with ``--no-prefect`` (the work in this process) and under a Prefect flow
  (a ``render-sessions`` task per chunk of sessions, each session extracted in it).
* ``openai``: the tiny sessions against the local fake server answering after ``--latency``
  seconds, ``--concurrency`` in flight: ``--no-prefect`` and under Prefect (a ``call-model``
  task per request).

CPU is user + system seconds of the run's process (every thread) and, under Prefect, of its
temporary API server (read from /proc before it is stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _server_cpu() -> float:
    """CPU seconds of the temporary Prefect API server this process started (0 without)."""
    from memkiln.flows.ephemeral import _servers

    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for proc in _servers():
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


# -- in the child -----------------------------------------------------------------------


def child(args: argparse.Namespace) -> dict[str, Any]:
    started, cpu = time.perf_counter(), _cpu()
    if args.child == "noop":
        from prefect import flow, task

        @task(name="noop", persist_result=False)
        def noop(i: int) -> int:
            return i

        @flow(name="bench-noop")
        def many(n: int) -> int:
            futures = [noop.submit(i) for i in range(n)]
            return sum(f.result() for f in futures)

        many(args.n)
        extra: dict[str, Any] = {"tasks": args.n}
    else:
        from memkiln.flows.extract import extract_flow
        from memkiln.pipeline.extract import extract_store
        from memkiln.settings import Options, Settings

        fields: dict[str, Any] = {
            "db": args.db,
            "backfill": True,
            "min_rollout_idle_hours": 0,
            "sources": ["cli", "vscode", "exec", "mcp", "unknown"],
            "progress": False,
        }
        if args.base_url:
            fields |= {
                "backend": "openai",
                "base_url": args.base_url,
                "model": "fake-model",
                "max_retries": 0,
                "concurrency": args.concurrency,
            }
        settings = Settings(**fields)
        if args.child == "local":
            summary = extract_store(settings)
        else:
            summary = extract_flow(Options(**dict(settings)))
        extra = {"outcomes": summary.outcomes, "requests": summary.requests}
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "cpu_s": round(_cpu() - cpu, 2),
        "server_cpu_s": round(_server_cpu(), 2),
        **extra,
    }


# -- the driver ---------------------------------------------------------------------------


def run_child(home: Path, *argv: str) -> dict[str, Any]:
    """A measurement in a child process; with the growth of Prefect's database (its task
    runs, states and events are kept: nothing is removed in ephemeral mode)."""
    db = home / "prefect.db"
    before = _db_size(home)
    env = {**os.environ, **QUIET, "PREFECT_HOME": str(home), "MEMKILN_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if db.exists():
        result["prefect_db_kb"] = round((_db_size(home) - before) / 1024)
    return result


def _db_size(home: Path) -> int:
    return sum(p.stat().st_size for p in home.glob("prefect.db*"))


def ingest(archive: Path, db: Path) -> None:
    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    ingest_archive(Settings(archive=archive, db=db, progress=False))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--noop", type=int, default=200)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    from tests.builders import make_archive
    from tests.fake_openai import FakeOpenAI

    work = Path(tempfile.mkdtemp(prefix="memkiln-bench-tasks-"))
    home = work / "prefect"
    home.mkdir()
    results: list[tuple[str, dict[str, Any]]] = []
    try:
        # Prefect's own cost per task: a flow of N empty tasks minus a flow of none
        run_child(home, "noop", "--n", "1")  # the Prefect database migrated once
        zero = run_child(home, "noop", "--n", "0")
        many = run_child(home, "noop", "--n", str(args.noop))
        results += [("noop 0", zero), (f"noop {args.noop}", many)]

        stores = {"sample": work / "sample.duckdb", "tiny": work / "tiny.duckdb"}
        ingest(REPO / "data" / "sample-archive", stores["sample"])
        make_archive(work / "tiny", args.sessions)
        ingest(work / "tiny", stores["tiny"])

        def fresh(name: str, label: str) -> str:
            copy = work / f"{label}.duckdb"
            shutil.copy(stores[name], copy)
            return str(copy)

        for name in ("sample", "tiny"):
            for mode in ("local", "prefect"):
                label = f"heuristic {name} {mode}"
                results.append((label, run_child(home, mode, "--db", fresh(name, label))))
        with FakeOpenAI(latency=args.latency) as fake:
            for mode in ("local", "prefect"):
                label = f"openai tiny {mode}"
                db = fresh("tiny", label.replace(" ", "-"))
                argv = [mode, "--db", db, "--base-url", fake.base_url]
                results.append(
                    (label, run_child(home, *argv, "--concurrency", str(args.concurrency)))
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"load average at the end: {os.getloadavg()}")
    print(f"{'run':<28} {'wall s':>8} {'cpu s':>7} {'server cpu s':>13}  details")
    for label, r in results:
        details = {k: v for k, v in r.items() if k not in ("wall_s", "cpu_s", "server_cpu_s")}
        print(f"{label:<28} {r['wall_s']:>8} {r['cpu_s']:>7} {r['server_cpu_s']:>13}  {details}")
    per = {
        key: round((many[key] - zero[key]) / max(args.noop, 1) * 1000, 1)
        for key in ("wall_s", "cpu_s", "server_cpu_s")
    }
    print(f"per empty task (ms): wall {per['wall_s']}, flow cpu {per['cpu_s']}, "
          f"server cpu {per['server_cpu_s']}")  # fmt: skip


if __name__ == "__main__":
    main()
