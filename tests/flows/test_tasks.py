"""A job inside a Prefect flow run (memkiln/flows/tasks.py): each phase a task, each step a
task on the flow's task runner, and no step kept by its phase once it ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memkiln.settings import Options


@pytest.mark.timeout(300)
def test_under_prefect_no_step_of_a_run_is_kept_by_its_phase_until_the_phase_ends(
    sample_archive: Path, tmp_path: Path, prefect_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prefect hands an ended task's transaction, which holds its parameters and its result,
    # to the transaction of the task that submitted it: every ingest batch, chunk of
    # sessions and project rendered stayed in memory until its phase ended
    from prefect.settings import PREFECT_HOME, temporary_settings
    from prefect.transactions import Transaction

    from memkiln.flows.run import run_flow

    taken: list[str] = []
    real = Transaction.add_child

    def add_child(self: Transaction, child: Any) -> None:
        taken.append(child.key or "a task")
        real(self, child)

    monkeypatch.setattr(Transaction, "add_child", add_child)
    options = Options(
        archive=sample_archive,
        db=tmp_path / "m.duckdb",
        out=tmp_path / "out",
        backfill=True,
        min_rollout_idle_hours=0,
        progress=False,
    )
    with temporary_settings({PREFECT_HOME: prefect_home}):
        summary = run_flow(options)

    # every phase mapped its steps as tasks: the ingest batches, the sessions rendered and
    # extracted, the projects rendered
    assert summary.ingest.files_seen and summary.extract.outcomes.get("succeeded")
    assert len(list((tmp_path / "out").glob("*/raw_memories.md"))) == 3
    assert taken == []
