"""Extraction's store-free work as Prefect tasks on the flow's task runner (Dask workers
included, ``memkiln.llm.units``): a ``render-sessions`` task per chunk of sessions (their
requests rendered; the heuristic backend's outcomes with them) and, with a model backend, a
``call-model`` task per request (sent, the answer parsed and judged). The flow's process
reads, claims, decides what is sent and writes every outcome as it arrives
(``memkiln.pipeline.extract``).
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
import concurrent.futures
import itertools
import uuid
from contextlib import AbstractContextManager, suppress
from functools import cached_property, partial
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from memkiln.flows.task_runners import (
    current_runner,
    off_the_worker_pool,
    on_workers,
    parallelism,
    stopped_with,
    submit_step,
)
from memkiln.llm.backends import Request
from memkiln.llm.ratelimit import HOLD
from memkiln.llm.units import (
    Group,
    Ready,
    call_wire,
    close_kept_backends,
    group_to_wire,
    outcome_from_wire,
    ready_from_wire,
    render_wire,
    request_to_wire,
    stop_calls,
)
from memkiln.settings import Options
from memkiln.transforms.states import Outcome


@task(
    name="render-sessions",
    task_run_name="render sessions {index}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def render_sessions_task(
    group: dict[str, Any], options: Options, index: int
) -> list[dict[str, Any]]:
    """A chunk of sessions rendered into their requests (the heuristic's outcomes with
    them): pure work, a group on the wire in, its requests on the wire out."""
    return render_wire(group, options)


@task(
    name="call-model",
    task_run_name="request {index}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def call_model_task(request: dict[str, Any], options: Options, index: int) -> dict[str, Any]:
    """One stage-one request sent to the model, its answer parsed and judged (never retried
    as a task: a request is charged once; the client retries 429 and 5xx itself). On a
    Dask worker it waits off the worker's thread pool."""
    off_the_worker_pool()
    return call_wire(request, options)


class Tasks:
    """The run's store-free work as Prefect tasks on the flow's task runner: as many
    chunks rendered ahead as the runner has workers."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.runner = current_runner()
        self._numbers = itertools.count()
        self._calls: set[PrefectFuture[Any]] = set()  # submitted, not finished
        #: this run's token on its requests: a stop ends the calls of this run only
        self.run = uuid.uuid4().hex

    @cached_property
    def ahead(self) -> int:
        return parallelism(self.runner)  # a local Dask cluster starts here, not before

    def render(self, group: Group) -> list[Ready]:
        future = submit_step(
            render_sessions_task, group_to_wire(group), self.options, next(self._numbers)
        )
        return [ready_from_wire(wire) for wire in future.result()]

    async def call(self, request: Request) -> Outcome:
        wire = request_to_wire(request) | {"run": self.run, "hold": HOLD.get()}
        # submitted from a worker thread: a submission takes the flow's process 0.1-0.3 s on
        # Dask (the task and its request serialized for the scheduler), and the event loop
        # meanwhile admits the other requests let go at the same window's edge
        submit = partial(submit_step, call_model_task, wire, self.options, next(self._numbers))
        future = await asyncio.to_thread(submit)
        self._calls.add(future)
        try:
            await _finished(future)
        finally:
            self._calls.discard(future)
        return outcome_from_wire(await asyncio.to_thread(future.result))

    def running(self) -> AbstractContextManager[None]:
        return stopped_with(self.runner)

    def stop(self) -> None:
        """Calls running in this process (the thread runner) or in a Dask worker end at
        once, sending nothing more, and those not started yet are cancelled
        (``stop_calls``); a local Dask cluster then ends with the run (``stopped_with``)."""
        stop_calls(self.run)
        with suppress(Exception):  # a cluster already closing: its workers end anyway
            on_workers(self.runner, stop_calls, self.run)  # the calls on Dask workers
        for future in list(self._calls):
            wrapped = getattr(future, "wrapped_future", None)
            if isinstance(wrapped, concurrent.futures.Future):  # the thread runner's
                wrapped.cancel()  # only one not started yet; a running one ends by itself

    def close(self) -> None:
        close_kept_backends()  # the call tasks' backends, when they ran in this process


async def _finished(future: PrefectFuture[Any]) -> None:
    """Wait for ``future`` without holding a thread."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def notify(_: PrefectFuture[Any]) -> None:  # in the thread that ended the task
        with suppress(RuntimeError):  # the loop closed: the run stopped, nobody waits
            loop.call_soon_threadsafe(settle)

    future.add_done_callback(notify)
    await done
