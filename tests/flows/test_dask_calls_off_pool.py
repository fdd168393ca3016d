"""On Dask, a model call waits off its worker's thread pool (``off_the_worker_pool``): the
requests in flight are those the run's pace admits, not one per worker thread. Shown with
a cluster of one worker thread whose tasks can only end together (a barrier of three)."""

from __future__ import annotations

import threading

import pytest

from memkiln.flows.task_runners import off_the_worker_pool

#: Seconds a task waits at the barrier before it counts as never met (a failure, not a
#: time); without leaving the pool the barrier cannot be met, so any wait breaks it.
NEVER = 120
CANNOT = 2

#: The barriers by name (a task's arguments are pickled, even on a cluster in this process).
BARRIERS: dict[str, threading.Barrier] = {}


def meet(name: str, leave: bool) -> int:
    """Wait for the barrier ``name``, off the worker's pool when ``leave``."""
    if leave:
        off_the_worker_pool()
    return BARRIERS[name].wait(timeout=NEVER if leave else CANNOT)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("leave", [True, False])
def test_calls_off_the_pool_run_together_on_a_worker_of_one_thread(leave: bool) -> None:
    from distributed import Client, LocalCluster

    name = f"leave={leave}"
    barrier = BARRIERS[name] = threading.Barrier(3)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        futures = [client.submit(meet, name, leave, pure=False) for _ in range(3)]
        if leave:  # all three wait at once: the barrier is met
            assert sorted(f.result() for f in futures) == [0, 1, 2]
        else:  # the one thread holds the first: the barrier breaks
            with pytest.raises(threading.BrokenBarrierError):
                futures[0].result()
            barrier.abort()
            for f in futures:
                f.cancel()
