"""The bounded, ordered window the flow uses to keep tasks in flight (memkiln/io/runner.py)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from memkiln.errors import ConfigError
from memkiln.io.runner import ordered_results, task_runner, with_task_runner


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


def test_the_thread_runner_leaves_a_flow_as_it_is_and_a_dask_address_needs_dask() -> None:
    flow = object()
    assert with_task_runner(flow, kind="thread") is flow
    with pytest.raises(ConfigError):
        task_runner("thread", "tcp://somewhere:8786")
    with pytest.raises(ConfigError):
        task_runner("spark")
