"""Crash safety, the fast variant of ``bench/chaos.py``: the real ``memkiln`` console script
is killed with SIGKILL once in each phase (ingest, extraction against a slowed model server,
consolidation), then the work is rerun and compared with a run that was never killed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def chaos() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memkiln_chaos", REPO / "bench" / "chaos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_kill_in_each_phase_then_a_rerun_loses_doubles_and_half_writes_nothing(
    tmp_path: Path,
) -> None:
    bench = chaos()
    results = bench.run_trials(
        3, seed=7, work=tmp_path / "chaos", latency=0.2, quick=True, in_process=True
    )
    assert [t.phase for t in results] == ["ingest", "extract", "consolidate"]
    assert [t.problems for t in results] == [[], [], []]
    assert bench.tally(results)["clean"] == 3
