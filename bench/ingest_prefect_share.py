"""Where ingest's CPU goes with Prefect on: the same archives ingested three ways, each in its
own child process, and the steady CPU-s per GiB of each (larger archive minus smaller).

    .venv/bin/python bench/ingest_prefect_share.py [--sizes 100,400] [--work bench/work]

* ``plain``: ``ingest_archive`` without Prefect (batches prepared in a worker thread);
* ``task path``: the same without Prefect, but each batch prepared as Prefect's task runner
  prepares it (``prepared_on`` a runner that spreads: one ``prepare_step`` in flight in a
  worker thread, the batch and its result as Arrow IPC): what the task path itself costs;
* ``prefect``: ``memkiln ingest`` as users run it (its own ``MEMKILN_HOME`` and
  ``PREFECT_HOME``: Prefect's temporary API server started for the run), split into the
  ``memkiln`` process and its descendants (the server), each last seen by polling ``/proc``
  every 0.2 s (so each is a little under its whole).
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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import MIB, ensure_archive

HERE = Path(__file__).resolve().parent


class _TaskPathRunner:
    """Prepares batches as the Prefect runner does (results in order, one in flight)."""

    spreads = True

    def map(self, step: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending: deque[Future[Any]] = deque()
            for item in items:
                pending.append(pool.submit(step, *item))
                if len(pending) > 1:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def phase(mode: str, archive: Path, db: Path) -> dict[str, float]:
    """In the child: ingest ``archive`` without Prefect; CPU-s of this process."""
    from memkiln.pipeline.ingest import ingest_archive, prepared_on
    from memkiln.settings import Settings

    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    kw = {"prepare": prepared_on(_TaskPathRunner())} if mode == "task path" else {}  # type: ignore[arg-type]
    started = _cpu()
    ingest_archive(Settings(archive=archive, db=db), **kw)  # type: ignore[arg-type]
    return {"cpu": _cpu() - started}


def _stat(pid: int) -> tuple[int, float] | None:
    """Parent pid and CPU-s (user + system) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prefect_run(archive: Path, db: Path) -> dict[str, float]:
    """``memkiln ingest`` with Prefect on: CPU-s of all, of the memkiln process, of the rest."""
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    home = Path(tempfile.mkdtemp(prefix="memkiln-share-", dir=db.parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMKILN_", "PREFECT_"))}
    env |= {"MEMKILN_HOME": str(home), "PREFECT_HOME": str(home / "prefect")}
    env |= {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    cmd = [
        sys.executable, "-c", "import sys; from memkiln.cli import main; sys.exit(main())",
        "ingest", "--archive", str(archive), "--db", str(db), "--no-progress",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    own, rest = 0.0, {}
    while proc.poll() is None:
        info = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
        tree, grown = {proc.pid}, True
        while grown:
            grown = False
            for pid, s in info.items():
                if s and s[0] in tree and pid not in tree:
                    tree.add(pid)
                    grown = True
        for pid in tree - {proc.pid}:
            got = info.get(pid)
            if got:
                rest[pid] = got[1]
        mine = info.get(proc.pid)
        own = mine[1] if mine else own
        time.sleep(0.2)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(home, ignore_errors=True)
    if proc.returncode:
        raise SystemExit(
            f"memkiln ingest failed: {proc.stderr.read()[-1500:] if proc.stderr else ''}"
        )
    total = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"cpu": total, "memkiln process": own, "server": sum(rest.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="100,400")
    parser.add_argument("--work", type=Path, default=HERE / "work")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args.phase, args.archive, args.db)))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    small, large = (int(s) for s in args.sizes.split(","))
    db = args.work / "share.duckdb"
    got: dict[str, dict[int, dict[str, float]]] = {}
    sizes: dict[int, float] = {}
    for size in (small, large):
        made = ensure_archive(args.work, size)
        archive, sizes[size] = made.path, made.bytes / MIB
        for mode in ("plain", "task path"):
            out = subprocess.run(
                [sys.executable, __file__, "--phase", mode, "--archive", str(archive), "--db",
                 str(db)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            got.setdefault(mode, {})[size] = json.loads(out.stdout.splitlines()[-1])
        got.setdefault("prefect", {})[size] = prefect_run(archive, db)
    gib = (sizes[large] - sizes[small]) / 1024
    print(f"{'measurement':<28} {small:>5} MiB CPU-s {large:>5} MiB CPU-s  steady CPU-s/GiB")
    for mode, runs in got.items():
        for key in runs[small]:
            name = mode if key == "cpu" else f"  of which {key}"
            a, b = runs[small][key], runs[large][key]
            print(f"{name:<28} {a:>15.2f} {b:>15.2f} {(b - a) / gib:>17.1f}")
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
