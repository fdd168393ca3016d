"""Resource limits: peak memory of memkiln on one 200 MB session and on 100,000 tiny sessions.

Two archives are generated once under ``bench/work/limits`` (and reused):

- ``large``: one Codex session of about 200 MB, the bodies of synthetic sessions
  (``bench/synth.py``: long tool outputs, base64 reasoning blobs, event messages, secrets)
  appended after a single ``session_meta`` line;
- ``tiny``: 100,000 Codex sessions of five lines each (about 1.5 KB).

For each archive the ``memkiln`` commands run as a user runs them, each in its own process
(``MEMKILN_*`` variables, offline Prefect): ``ingest``, ``extract`` with the heuristic backend,
and, for the large session, ``render-input`` of its file. The peak resident memory of each
process (``VmHWM``, read by the process itself at exit) and of the whole process tree
(sampled every 50 ms, Prefect's helpers included) is printed with the wall time.

    python bench/limits.py                 # both archives
    python bench/limits.py --only large    # or tiny
    python bench/limits.py --large-mb 50   # a smaller large session (quicker look)

The target (memkiln issue 14): every command under 1.5 GB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synth import MIB, render_rollout  # noqa: E402

LIMIT_MB = 1536
TINY_UID = "019a{:04x}-0000-7000-8000-{:012x}"

#: Runs a memkiln command in this process and prints its peak RSS (VmHWM) on exit.
RUNNER = r"""
import atexit, sys
def _peak():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                sys.stderr.write("\nPEAK_KB %s\n" % line.split()[1])
atexit.register(_peak)
from memkiln.cli import main
sys.argv = ["memkiln", *sys.argv[1:]]
main()
"""


def large_archive(root: Path, mb: int) -> Path:
    """One Codex session of about ``mb`` MiB (reused when already there)."""
    archive = root / f"large-{mb}"
    done = archive / "done.json"
    if done.exists():
        return archive
    shutil.rmtree(archive, ignore_errors=True)
    rel, first = render_rollout(7, 0)
    path = archive / rel
    path.parent.mkdir(parents=True)
    size = 0
    with path.open("wb") as fh:
        fh.write(first)
        size += len(first)
        index = 1
        while size < mb * MIB:
            _, body = render_rollout(7, index)
            body = body.split(b"\n", 1)[1]  # the other sessions' turns, not their meta line
            fh.write(body)
            size += len(body)
            index += 1
    done.write_text(json.dumps({"bytes": size, "file": rel}))
    return archive


def tiny_archive(root: Path, n: int) -> Path:
    """``n`` five-line Codex sessions (reused when already there)."""
    archive = root / f"tiny-{n}"
    done = archive / "done.json"
    if done.exists():
        return archive
    shutil.rmtree(archive, ignore_errors=True)
    total = 0
    for i in range(n):
        uid = TINY_UID.format(i % 65536, i)
        day = archive / "sessions" / "2026" / f"{1 + i // 10000:02d}" / f"{1 + i % 28:02d}"
        day.mkdir(parents=True, exist_ok=True)
        ts = f"2026-{1 + i // 10000:02d}-{1 + i % 28:02d}T10:{i % 60:02d}:00.000Z"
        lines = [
            {"timestamp": ts, "type": "session_meta",
             "payload": {"id": uid, "timestamp": ts, "cwd": f"/home/dev/p{i % 50}",
                         "originator": "codex_cli_rs", "cli_version": "0.140.0", "source": "cli"}},
            {"timestamp": ts, "type": "response_item",
             "payload": {"type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": f"task {i}: run the tests"}]}},
            {"timestamp": ts, "type": "response_item",
             "payload": {"type": "function_call", "name": "shell", "call_id": "c1",
                         "arguments": json.dumps({"command": ["pytest", "-q"]})}},
            {"timestamp": ts, "type": "response_item",
             "payload": {"type": "function_call_output", "call_id": "c1",
                         "output": "Exit code: 1\nOutput:\n1 failed, 12 passed"}},
            {"timestamp": ts, "type": "response_item",
             "payload": {"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "One test fails."}]}},
        ]  # fmt: skip
        data = "".join(json.dumps(x) + "\n" for x in lines)
        (day / f"rollout-2026-01-01T10-00-00-{uid}.jsonl").write_text(data)
        total += len(data)
    done.write_text(json.dumps({"bytes": total, "files": n}))
    return archive


def measure(args: list[str], env: dict[str, str]) -> dict[str, float | int]:
    """Run one memkiln command; its own peak RSS and the peak of its process tree (MiB)."""
    # stderr goes to a file: a pipe could fill while nobody reads it
    with tempfile.TemporaryFile(mode="w+") as errors:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            text=True,
        )
        root = psutil.Process(proc.pid)
        tree_peak = 0
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                rss = root.memory_info().rss
                for child in root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        rss += child.memory_info().rss
                tree_peak = max(tree_peak, rss)
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        errors.seek(0)
        err = errors.read()
    peaks = [int(line.split()[1]) for line in err.splitlines() if line.startswith("PEAK_KB")]
    if proc.returncode != 0:
        tail = "\n".join(line for line in err.splitlines() if not line.startswith("PEAK_KB"))
        raise SystemExit(f"memkiln {' '.join(args)} exited {proc.returncode}:\n{tail[-2000:]}")
    return {
        "seconds": round(seconds, 1),
        "peak_mb": round(peaks[-1] / 1024) if peaks else -1,
        "tree_peak_mb": round(tree_peak / MIB),
    }


def run_case(name: str, archive: Path, work: Path, *, render: Path | None) -> list[dict]:  # type: ignore[type-arg]
    home = work / f"home-{name}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {
        **os.environ,
        "MEMKILN_ARCHIVE": str(archive),
        "MEMKILN_DB": str(home / "memkiln.duckdb"),
        "MEMKILN_OUT": str(home / "memories"),
        "MEMKILN_BACKEND": "heuristic",
        "MEMKILN_BACKFILL": "true",
        "MEMKILN_MIN_ROLLOUT_IDLE_HOURS": "0",
        "MEMKILN_MAX_ROLLOUTS_PER_RUN": "200000",
        "MEMKILN_SCAN_LIMIT": "200000",
        "PREFECT_HOME": str(home / "prefect"),
        "MEMKILN_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    commands: list[list[str]] = [
        ["ingest", "--archive", str(archive), "--no-progress"],
        ["extract", "--backend", "heuristic", "--backfill", "--min-idle-hours", "0",
         "--max-rollouts", "200000", "--no-progress"],
    ]  # fmt: skip
    if render is not None:
        commands.append(["render-input", str(render)])
    rows = []
    for command in commands:
        row = {"case": name, "command": command[0], **measure(command, env)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=HERE / "work" / "limits")
    parser.add_argument("--only", choices=["large", "tiny"])
    parser.add_argument("--large-mb", type=int, default=200)
    parser.add_argument("--tiny-n", type=int, default=100_000)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        if args.only in (None, "large"):
            archive = large_archive(args.work, args.large_mb)
            (session,) = archive.rglob("*.jsonl")
            print(f"large: {session.stat().st_size / MIB:.0f} MiB in one session", flush=True)
            rows += run_case("large", archive, work, render=session)
        if args.only in (None, "tiny"):
            archive = tiny_archive(args.work, args.tiny_n)
            print(f"tiny: {args.tiny_n} sessions", flush=True)
            rows += run_case("tiny", archive, work, render=None)
    print(f"\n{'case':<6} {'command':<13} {'seconds':>8} {'peak MB':>8} {'tree MB':>8}")
    for r in rows:
        flag = "" if r["peak_mb"] < LIMIT_MB else "  over the 1.5 GB limit"
        print(
            f"{r['case']:<6} {r['command']:<13} {r['seconds']:>8} {r['peak_mb']:>8} "
            f"{r['tree_peak_mb']:>8}{flag}"
        )
    return 0 if all(r["peak_mb"] < LIMIT_MB for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
