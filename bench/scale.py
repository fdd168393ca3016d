"""Scale benchmark: the prepare step, the single writer, the pipeline on 1 and 2 workers, and
a projection to 8, 32 and 128 workers.

    python bench/scale.py [--mb 100] [--work DIR] [--skip dask]

On a synthetic Codex archive (``bench/synth.py``), each measurement in its own child process:

* ``prepare``: every batch read, split, redacted, parsed and normalized into Arrow
  (``memkiln.io.loader.prepare_batch_ipc``, what a worker task does), nothing written: CPU-s
  per GiB of archive (user + system, every thread; imports excluded).
* ``writer``: the batches prepared first (kept as Arrow IPC in memory), then written into a
  fresh DuckDB file by ``write_batch`` alone: the writer's own MB/s (archive MiB per second of
  writing) and its CPU-s per GiB.
* ``pipeline 1``: ``ingest_archive`` as memkiln runs it by default (one worker thread prepares
  the next batch while the writer writes).
* ``pipeline 2``: the same with a local Dask cluster of two worker processes preparing
  batches (Arrow IPC back to the writer), i.e. what ``--task-runner dask`` does, without the
  Prefect server's own cost.

Projection: ``N`` workers each prepare ``3600 / prepare_cpu_per_gib`` GiB per hour of CPU; the
writer takes at most ``3600 / writer_cpu_per_gib`` GiB per hour on its one core (its CPU time,
not its wall time, which on a shared machine measures the neighbours). The pipeline is bounded
by the smaller, so the writer saturates at ``N* = prepare_cpu_per_gib / writer_cpu_per_gib``
workers.

MB means MiB throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process import child_env, console_script_defaults
from synth import MIB, ensure_archive

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
WORKERS = (8, 32, 128)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _plan(archive: Path, db: Path) -> list:  # type: ignore[type-arg]
    """The ingest batches of ``archive`` against an empty store (as ``memkiln ingest``)."""
    from memkiln.constants import INGEST_BATCH_FILES
    from memkiln.io.store import open_store
    from memkiln.pipeline.ingest import plan_archive
    from memkiln.settings import Settings
    from memkiln.transforms.plan import batches

    con = open_store(db)
    try:
        plan = plan_archive(con, archive)
    finally:
        con.close()
    return batches(plan, max_bytes=Settings().batch_bytes, max_files=INGEST_BATCH_FILES)


def phase_prepare(archive: Path, db: Path) -> dict:  # type: ignore[type-arg]
    from memkiln.io.loader import frame_to_ipc, prepare_batch_ipc

    todo = _plan(archive, db)
    cpu0, t0 = _cpu(), time.perf_counter()
    size = 0
    for batch in todo:
        size += int(batch["size"].sum())
        prepare_batch_ipc(frame_to_ipc(batch))
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": _cpu() - cpu0,
        "bytes": size,
        "batches": len(todo),
        "rss_mb": _rss_mb(),
    }


def phase_writer(archive: Path, db: Path) -> dict:  # type: ignore[type-arg]
    from memkiln.io.loader import PreparedBatch, frame_to_ipc, prepare_batch_ipc, write_batch
    from memkiln.io.run_records import recorded_run
    from memkiln.io.store import open_store
    from memkiln.pipeline.ingest import writer_settings

    todo = _plan(archive, db)
    prepared = [prepare_batch_ipc(frame_to_ipc(b)) for b in todo]
    size = sum(int(b["size"].sum()) for b in todo)
    con = open_store(db)
    try:
        writer_settings(con)  # as an ingest sets them
        with recorded_run(con, command="ingest", archive="bench", counts=dict) as run_id:
            cpu0, t0 = _cpu(), time.perf_counter()
            for raw in prepared:
                write_batch(con, PreparedBatch.from_ipc(raw), run_id=run_id)
            seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    finally:
        con.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "bytes": size, "rss_mb": _rss_mb()}


def phase_pipeline(archive: Path, db: Path, workers: int) -> dict:  # type: ignore[type-arg]
    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    settings = Settings(archive=archive, db=db)
    if workers <= 1:
        cpu0, t0 = _cpu(), time.perf_counter()
        summary = ingest_archive(settings)
        extra = 0.0
    else:
        import distributed

        from memkiln.io.loader import PreparedBatch, frame_to_ipc, prepare_batch_ipc
        from memkiln.pipeline.runner import ordered_results

        with (
            distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            client.run(lambda: __import__("memkiln.io.loader"))  # imports before timing

            def on_dask(todo, *, rules):  # type: ignore[no-untyped-def]
                def submit(i: int):  # type: ignore[no-untyped-def]
                    return client.submit(prepare_batch_ipc, frame_to_ipc(todo[i]), pure=False)

                for batch, raw in zip(
                    todo, ordered_results(submit, range(len(todo)), ahead=workers), strict=True
                ):
                    yield batch, PreparedBatch.from_ipc(raw)

            cpu_workers0 = sum(client.run(_cpu).values())
            cpu0, t0 = _cpu(), time.perf_counter()
            summary = ingest_archive(settings, prepare=on_dask)
            extra = sum(client.run(_cpu).values()) - cpu_workers0
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": _cpu() - cpu0 + extra,
        "bytes": summary.bytes_read,
        "items": summary.items,
        "rss_mb": _rss_mb(),
    }


def child(phase: str, archive: Path, db: Path, workers: int = 1) -> dict:  # type: ignore[type-arg]
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--phase", phase, "--archive", str(archive), "--db", str(db)]
    cmd += ["--workers", str(workers)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"phase {phase} failed (exit {proc.returncode})")
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def project(prepare_cpu_per_gib: float, writer_mb_s: float) -> list[tuple[int, float]]:
    """``(workers, GiB per hour)`` for each worker count, bounded by the writer."""
    per_worker = 3600 / prepare_cpu_per_gib
    writer = writer_mb_s * 3600 / 1024
    return [(n, min(n * per_worker, writer)) for n in WORKERS]


def report(results: dict) -> None:  # type: ignore[type-arg]
    """The table and the projection. The writer's capacity is taken from its CPU time (one
    core's worth), not its wall time: on a shared machine the wall time measures the
    neighbours; both are printed."""
    print()
    print("| measurement | MB | s | MB/s | CPU-s/GB | peak RSS MB | load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        mb = r["bytes"] / MIB
        print(
            f"| {name} | {mb:,.0f} | {r['seconds']:.1f} | {mb / r['seconds']:.1f} | "
            f"{r['cpu_seconds'] / (r['bytes'] / GIB):.1f} | {r['rss_mb']:,.0f} | {r['load']:.1f} |"
        )
    prep = results["prepare"]["cpu_seconds"] / (results["prepare"]["bytes"] / GIB)
    w = results["writer"]
    writer_cpu = w["cpu_seconds"] / (w["bytes"] / GIB)
    writer_wall = w["bytes"] / MIB / w["seconds"]
    writer = 1024 / writer_cpu  # MB/s of one busy core
    print()
    print(
        f"one worker prepares {3600 / prep:,.0f} GiB/h ({prep:.1f} CPU-s/GiB); the writer "
        f"takes {writer * 3600 / 1024:,.0f} GiB/h on one core ({writer_cpu:.1f} CPU-s/GiB, "
        f"{writer:.0f} MB/s; {writer_wall:.1f} MB/s of wall time here); it saturates at "
        f"{prep / writer_cpu:.1f} workers"
    )
    print("| workers | GiB/hour | bound by |")
    print("|---:|---:|---|")
    for n, gib_h in project(prep, writer):
        bound = "writer" if gib_h >= writer * 3600 / 1024 - 1e-9 else "workers"
        print(f"| {n} | {gib_h:,.0f} | {bound} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="archive size in MiB (100)")
    parser.add_argument("--work", type=Path, default=HERE / "work", help="work dir")
    parser.add_argument("--skip", default="", help="comma-separated: dask (no 2-worker run)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--report", type=Path, help="print the tables of a --json file again")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        allocator = console_script_defaults()
        out = {
            "prepare": lambda: phase_prepare(args.archive, args.db),
            "writer": lambda: phase_writer(args.archive, args.db),
            "pipeline": lambda: phase_pipeline(args.archive, args.db, args.workers),
        }[args.phase]()
        out["allocator"] = allocator
        print("RESULT " + json.dumps(out))
        return 0

    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    args.work.mkdir(parents=True, exist_ok=True)
    archive = ensure_archive(args.work, args.mb)
    db = args.work / "bench-scale.duckdb"
    load0 = os.getloadavg()
    print(f"archive {archive.mb} MiB: {archive.files} files; load {load0[0]:.1f}", flush=True)
    results = {}
    for name, phase, workers in (
        ("prepare", "prepare", 1),
        ("writer", "writer", 1),
        ("pipeline 1 worker", "pipeline", 1),
        ("pipeline 2 workers", "pipeline", 2),
    ):
        if workers > 1 and "dask" in skip:
            continue
        print(f"{name} ...", flush=True)
        r = child(phase, archive.path, db, workers)
        r["load"] = os.getloadavg()[0]
        results[name] = r
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)

    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
