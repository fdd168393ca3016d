"""Where a flow run's tasks execute (memkiln/flows/task_runners.py): the runner's choice,
and a local Dask cluster's workers."""

from __future__ import annotations

import gc
import os
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from memkiln.errors import ConfigError
from memkiln.flows.task_runners import task_runner, with_task_runner


def test_the_thread_runner_leaves_a_flow_as_it_is_and_a_dask_address_needs_dask() -> None:
    flow = object()
    assert with_task_runner(flow, kind="thread") is flow
    with pytest.raises(ConfigError):
        task_runner("thread", "tcp://somewhere:8786")
    with pytest.raises(ConfigError):
        task_runner("spark")


def test_a_heartbeat_after_the_scheduler_closed_is_dropped_and_nothing_else() -> None:
    import logging

    from memkiln.flows.task_runners import (
        HEARTBEAT_AFTER_SCHEDULER,
        quiet_heartbeat_after_scheduler,
    )

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("distributed.worker")
    handler = Keep()
    logger.addHandler(handler)
    before = list(logger.filters)
    try:
        quiet_heartbeat_after_scheduler()
        quiet_heartbeat_after_scheduler()  # twice: one filter
        assert len(logger.filters) == len(before) + 1
        logger.error(HEARTBEAT_AFTER_SCHEDULER)
        logger.error("Worker stream died during communication")
        logger.warning("Scheduler was unaware of this worker; shutting down.")
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before
    assert seen == [
        "Worker stream died during communication",
        "Scheduler was unaware of this worker; shutting down.",
    ]


def test_the_workers_of_a_local_cluster_drop_that_heartbeat_while_a_phase_runs() -> None:
    from memkiln.flows.task_runners import quiet_heartbeat_after_scheduler, stopped_with

    ran: list[object] = []

    class Client:
        def run(self, function: object) -> dict[str, int]:
            ran.append(function)
            return {"tcp://127.0.0.1:1": os.getpid()}

    class DaskTaskRunner:  # the name is what marks a Dask runner
        address = None
        client = Client()

    with stopped_with(DaskTaskRunner()):
        assert quiet_heartbeat_after_scheduler in ran
    ran.clear()

    class Remote(DaskTaskRunner):
        address = "tcp://sched:8786"  # a user's own cluster: its workers' logs are theirs

    with stopped_with(Remote()):
        pass
    assert ran == []


def test_a_worker_killed_because_it_was_slow_to_close_is_not_told_and_nothing_else() -> None:
    import logging

    from memkiln.flows.task_runners import quiet_worker_killed_at_close

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("distributed.nanny")
    handler = Keep()
    logger.addHandler(handler)
    before = list(logger.filters)
    # a local cluster started by an earlier test of this process installed it already
    logger.filters[:] = [f for f in before if type(f).__name__ != "_WorkerKilledAtClose"]
    try:
        quiet_worker_killed_at_close()
        quiet_worker_killed_at_close()  # twice: one filter
        assert [type(f).__name__ for f in logger.filters].count("_WorkerKilledAtClose") == 1
        logger.warning("Worker process still alive after %.1f seconds, killing", 4.0)
        logger.warning("Restarting worker")
        logger.error("Failed to start worker")
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before
    assert seen == ["Restarting worker", "Failed to start worker"]


def test_a_task_cancelled_as_a_worker_closes_is_not_told_and_nothing_else() -> None:
    import logging

    from memkiln.flows.task_runners import quiet_heartbeat_after_scheduler

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("distributed.worker.state_machine")
    handler = Keep()
    logger.addHandler(handler)
    before = list(logger.filters)
    try:
        quiet_heartbeat_after_scheduler()
        task = "<Task cancelled name=\"execute('call_model_task-43')\" coro=<Worker.execute()>>"
        logger.warning(f"Async instruction for {task} ended with CancelledError")
        logger.exception(f"Unhandled exception in async instruction for {task}")
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before
    assert seen == [f"Unhandled exception in async instruction for {task}"]


class Held:
    """A step's parameter or result, watched through a weak reference."""


def _still_alive(refs: tuple[weakref.ref[Held], ...], *, within: float = 5.0) -> bool:
    """Whether an object of ``refs`` is still alive ``within`` seconds (the worker thread that
    ran the step lets go of its arguments just after the result is handed over)."""
    deadline = time.monotonic() + within
    while True:
        gc.collect()
        if all(ref() is None for ref in refs):
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def _steps_held(submit: Any, n: int) -> list[bool]:
    """Inside a phase task of a flow run on the thread runner: ``n`` steps submitted with
    ``submit``, one after another; for each, whether its parameter or its result is still
    alive once it ended and the phase dropped both (held by the phase: until it ends)."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    @task(cache_policy=NO_CACHE, persist_result=False)
    def step(value: Held) -> Held:
        return Held()

    @task(cache_policy=NO_CACHE)
    def phase() -> list[bool]:
        alive = []
        for _ in range(n):
            given = Held()
            result = submit(step, given).result()
            refs = (weakref.ref(given), weakref.ref(result))
            del given, result
            alive.append(_still_alive(refs))
        return alive

    @flow
    def job() -> list[bool]:
        return phase()

    return job()


def test_a_step_of_a_phase_is_not_kept_by_the_phase_once_it_ended(prefect_home: Path) -> None:
    # Prefect hands an ended task's transaction (with its parameters and result) to the
    # transaction of the task that submitted it, until that one ends: a run's every batch,
    # chunk of sessions and request stayed in memory until its phase ended
    from prefect.settings import PREFECT_HOME, temporary_settings

    from memkiln.flows.task_runners import submit_step

    with temporary_settings({PREFECT_HOME: prefect_home}):
        assert _steps_held(lambda step, *args: step.submit(*args), 2) == [True] * 2
        assert _steps_held(submit_step, 3) == [False] * 3
