"""The runner a recipe is given (memkiln/pipeline/runner.py): the local one does everything
here, in order; the ordered window keeps a bounded number of steps in flight; and every
phase and step of the recipes has its Prefect task (memkiln/flows/tasks.py)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from memkiln.pipeline.runner import LocalRunner, Runner, ordered_results
from memkiln.settings import Settings


def test_results_come_in_order_with_at_most_ahead_in_flight_beside_the_one_handed_over() -> None:
    submitted: list[int] = []
    taken: list[int] = []

    def submit(i: int) -> Future[int]:
        submitted.append(i)
        assert len(submitted) - len(taken) <= 3  # ahead=2, and the one handed over
        future: Future[int] = Future()
        future.set_result(i * 10)
        return future

    for value in ordered_results(submit, range(7), ahead=2):
        taken.append(value // 10)
    assert taken == list(range(7)) and submitted == list(range(7))


def test_the_local_runner_maps_a_step_in_order_one_item_at_a_time() -> None:
    called: list[tuple[str, int]] = []

    def step(name: str, n: int) -> str:
        called.append((name, n))
        return f"{name}{n}"

    mapped = LocalRunner().map(step, [("a", 1), ("b", 2), ("c", 3)])
    assert called == []  # nothing runs before a result is asked for
    assert next(mapped) == "a1" and called == [("a", 1)]
    assert list(mapped) == ["b2", "c3"]


def test_the_local_runner_runs_a_job_and_its_phases_here_with_itself(tmp_path: Path) -> None:
    runner = LocalRunner()
    settings = Settings(db=tmp_path / "m.duckdb")
    seen: list[Any] = []

    def phase(settings: Settings, *, runner: Runner, reporter: object, n: int) -> int:
        seen.append((runner, reporter, n))
        return n * 2

    def recipe(settings: Settings, runner: Runner, n: int) -> int:
        return runner.phase(phase, settings, parent_run_id=None, reporter="r", n=n) + 1

    assert runner.job(recipe, settings, 4) == 9
    assert seen == [(runner, "r", 4)]
    assert runner.flow_run_id() is None and runner.dispatch(settings) is None
    assert not runner.spreads


def test_every_phase_and_step_of_the_recipes_has_its_prefect_task() -> None:
    pytest.importorskip("prefect")
    from memkiln.flows.tasks import PHASE_TASKS, STEP_TASKS
    from memkiln.pipeline.consolidate import consolidate, render_step
    from memkiln.pipeline.extract import extract
    from memkiln.pipeline.ingest import ingest, prepare_step
    from memkiln.pipeline.publish import publish

    assert set(PHASE_TASKS) == {ingest, extract, consolidate, publish}
    assert set(STEP_TASKS) == {prepare_step, render_step}
    names = {task.name for task in [*PHASE_TASKS.values(), *STEP_TASKS.values()]}
    assert names == {
        "ingest-archive",
        "extract-sessions",
        "consolidate-projects",
        "publish",
        "prepare-batch",
        "render-project",
    }


class LoggingRunner(LocalRunner):
    """The local runner, keeping the title of each phase's counts it is asked to log."""

    def __init__(self) -> None:
        self.logged: list[str] = []

    def log_phase(self, section: Any) -> None:
        self.logged.append(section[0])


@pytest.mark.parametrize("command", ["run", "backfill"])
def test_run_and_backfill_log_each_phases_counts_as_it_ends(
    command: str, sample_archive: Path, tmp_path: Path
) -> None:
    from memkiln.pipeline.backfill import backfill_job
    from memkiln.pipeline.run import run_job

    settings = Settings(
        archive=sample_archive,
        db=tmp_path / "m.duckdb",
        out=tmp_path / "memories",
        backfill=True,
        progress=False,
    )
    runner = LoggingRunner()
    (run_job if command == "run" else backfill_job)(settings, runner)
    assert runner.logged == ["memkiln ingest", "memkiln extract", "memkiln consolidate"]
