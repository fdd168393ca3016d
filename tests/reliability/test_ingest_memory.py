"""Ingest memory follows a bounded part of a file, not the whole of a large one.

A 48 MiB session is ingested in a fresh process that reports its own peak resident memory
(``VmHWM``) before and after. Before the fix (issue 14, defect 10) the ingest grew by about 20
times the file (965 MB here); handled in parts it grows by about 12.6 times (607 MB), most of
it the fixed share DuckDB may hold. The bound sits between the two. ``bench/limits.py``
measures the 200 MB case.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

MIB = 1 << 20
FILE_MIB = 48
#: Peak growth allowed, in multiples of the file's size.
MAX_GROWTH = 16

CHILD = r"""
import sys
def peak_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
before = peak_mb()
summary = ingest_archive(Settings(archive=sys.argv[1], db=sys.argv[2]))
print(before, peak_mb(), summary.items)
"""


def large_session(root: Path, mib: int) -> Path:
    uid = "019c2222-0000-7000-8000-000000000001"
    path = root / "sessions" / f"rollout-2026-01-01T00-00-00-{uid}.jsonl"
    path.parent.mkdir(parents=True)
    rng = random.Random(1)
    words = ["build", "error", "warning", "passed", "failed", "module", "line", "value"]
    meta = {"timestamp": "2026-01-01T00:00:00.000Z", "type": "session_meta",
            "payload": {"id": uid, "cwd": "/w"}}  # fmt: skip
    with path.open("w") as fh:
        fh.write(json.dumps(meta) + "\n")
        size = i = 0
        while size < mib * MIB:
            output = "\n".join(
                " ".join(rng.choice(words) for _ in range(12)) + f" {i}-{j}" for j in range(800)
            )
            line = json.dumps({"timestamp": "2026-01-01T00:00:01.000Z", "type": "response_item",
                               "payload": {"type": "function_call_output", "call_id": f"c{i}",
                                           "output": output}})  # fmt: skip
            fh.write(line + "\n")
            size += len(line) + 1
            i += 1
    return path


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_ingest_memory_does_not_grow_with_a_large_session(tmp_path: Path) -> None:
    session = large_session(tmp_path / "archive", FILE_MIB)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "archive"), str(tmp_path / "m.duckdb")],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    before, after, items = (int(x) for x in result.stdout.strip().splitlines()[-1].split())
    file_mb = session.stat().st_size / MIB
    assert items > 100
    assert after - before < MAX_GROWTH * file_mb, (before, after, file_mb)
