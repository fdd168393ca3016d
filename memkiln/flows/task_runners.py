"""Where a run's stateless work executes under Prefect: the thread runner, or Dask
(prefect-dask).

The CPU-heavy steps that need no store (an ingest batch read, redacted, parsed and
normalized into Arrow; one project's memory files rendered) run as Prefect tasks on the
flow's task runner (``memkiln.flows.tasks.PrefectRunner.map``). The flow process stays the
only DuckDB writer: it submits a bounded number of tasks ahead and writes each result, in
order, as it arrives. Results that cross
processes are Arrow IPC bytes (``memkiln.io.loader.PreparedBatch.to_ipc``) or short
strings, never pickled rows.

- ``thread`` (default): ``ThreadPoolTaskRunner``; the work runs in the flow's process.
- ``dask``: ``DaskTaskRunner``: a local cluster of worker processes started for the run
  and closed with it (also on SIGTERM, which ends the flow through ``memkiln.io.signals``),
  or, with ``dask_address``, an existing cluster's scheduler (``tcp://host:8786``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from typing import Any, TypeVar, cast

from memkiln.errors import ConfigError

F = TypeVar("F")

#: Worker processes of the local Dask cluster (``--task-runner dask`` without an address):
#: one per core, one thread each (Polars and DuckDB use more threads inside a task).
LOCAL_DASK_WORKERS = max(1, min(os.cpu_count() or 1, 8))

#: What a worker of a local cluster logs, with a traceback, when its heartbeat meets the
#: scheduler (in the flow's process) already closed: the run is ending (stopped, or done), and
#: the user's terminal gets the run's own line instead.
HEARTBEAT_AFTER_SCHEDULER = "Failed to communicate with scheduler during heartbeat."
#: What a nanny (in the flow's process) logs when its worker has not exited within its share
#: of the cluster's close timeout (4 s) and is killed: on a loaded machine a stopped run's
#: workers can take longer, and the kill is what the stop wants anyway.
WORKER_KILLED_AT_CLOSE = "Worker process still alive after "
#: What a worker logs when a task it runs is cancelled (a stopped run's model calls, when the
#: cluster closes before they ended: seen at a load average of 25 on 2 cores).
TASK_CANCELLED = ("Async instruction for <Task cancelled", "ended with CancelledError")

#: Task arguments Dask sends without its "large graph" warning (a chunk of 64 sessions'
#: kept items, as Arrow IPC, was 19 MiB on the public corpus).
LARGE_GRAPH = "4GiB"

#: Seconds a Dask scheduler (``dask_address``) has to accept a connection before the run.
PROBE_SECONDS = 10.0


def with_task_runner(flow: F, *, kind: str, address: str | None = None) -> F:
    """``flow`` set to run its tasks on ``kind`` (the flows' own default is the thread
    runner, so that one changes nothing)."""
    if kind == "thread" and not address:
        return flow
    runner = task_runner(kind, address)
    if address:  # before any flow starts: a configuration error, not a failed run
        check_reachable(address)
    # F is a Prefect flow; with_options returns the same flow with another runner
    return flow.with_options(task_runner=runner)  # type: ignore[attr-defined,no-any-return]


def check_reachable(address: str, *, timeout: float = PROBE_SECONDS) -> None:
    """A ``ConfigError`` unless the Dask scheduler at ``address`` accepts a TCP connection
    (``tcp://`` and ``tls://`` addresses; others are left to Dask)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except ValueError as exc:
        raise ConfigError(f"invalid Dask scheduler address {address!r}: {exc}") from None
    if scheme not in ("tcp", "tls"):
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Dask scheduler at {address}: {exc}") from None


def task_runner(kind: str, address: str | None = None, *, workers: int | None = None) -> Any:
    """The Prefect task runner for ``kind`` (``thread`` or ``dask``)."""
    if kind == "thread":
        if address:
            raise ConfigError("--dask-address needs --task-runner dask")
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers or 4)
    if kind != "dask":
        raise ConfigError(f"unknown task runner {kind!r}: use thread or dask")
    try:
        from prefect_dask.task_runners import DaskTaskRunner
    except ImportError as exc:  # pragma: no cover - a dependency of memkiln
        raise ConfigError("--task-runner dask needs the prefect-dask package") from exc
    import dask

    # a chunk of sessions crosses to a worker as one task argument (Arrow IPC, tens of MB by
    # design): not the mistake Dask's "Sending large graph" warning on stderr is about
    dask.config.set({"distributed.admin.large-graph-warning-threshold": LARGE_GRAPH})
    if address:
        return DaskTaskRunner(address=address)
    return local_dask_runner()(
        cluster_kwargs={
            "n_workers": workers or LOCAL_DASK_WORKERS,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
            # no dashboard, but the scheduler still serves its HTTP routes: on a free port
            # of the loopback, not Dask's fixed 8787 (taken by a second run: a warning)
            "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
        }
    )


@cache
def local_dask_runner() -> type[Any]:
    """``DaskTaskRunner`` for a local cluster whose workers report their task runs to the
    flow's own Prefect API: with Prefect's temporary server (no ``PREFECT_API_URL``), the
    settings prefect-dask sends with each task name none, and every worker process would
    start a temporary server of its own (which outlives it when the run is killed)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_dask.task_runners import DaskTaskRunner

    class LocalDaskTaskRunner(DaskTaskRunner):
        def submit(
            self,
            task: Any,
            parameters: dict[str, Any],
            wait_for: Any = None,
            dependencies: Any = None,
        ) -> Any:
            url = temporary_api_url()
            if url is None:
                return super().submit(task, parameters, wait_for, dependencies)
            with temporary_settings(updates={PREFECT_API_URL: url}):
                return super().submit(task, parameters, wait_for, dependencies)

    return LocalDaskTaskRunner


def temporary_api_url() -> str | None:
    """The URL of the temporary Prefect API server this process started (none when
    ``PREFECT_API_URL`` names a server)."""
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        return None
    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return None
    for server in list(module.SubprocessASGIServer._instances.values()):
        process = server.server_process
        if process is not None and process.poll() is None:
            return str(server.api_url)
    return None


def submit_step(task: Any, *args: Any) -> Any:
    """``task.submit(*args)``: a step (a batch, a chunk of sessions, a request) of the phase
    task running it, submitted outside that task's Prefect transaction.

    Prefect hands a task's transaction, when it ends, to the transaction active where it
    was submitted (the phase's), which keeps it with its engine (the task's parameters and
    result) until the phase ends: a run's every step stayed in memory, 0.7 GB of extraction's
    frames on eight sessions of 30 MiB (1.9 GB peak with a model against 1.24 GB without
    Prefect), ingest's parsed batches likewise. A step has nothing to commit (no cache key,
    no result kept), so without a parent it ends as a task submitted by the flow does."""
    from prefect.transactions import BaseTransaction

    token = BaseTransaction.__var__.set(cast(Any, None))
    try:
        return task.submit(*args)
    finally:
        BaseTransaction.__var__.reset(token)


def on_workers(runner: Any, function: Callable[..., object], *args: object) -> None:
    """Run ``function(*args)`` in every worker process of a Dask ``runner`` (nothing on
    another runner); a worker that fails or is gone is skipped."""
    if _is_dask(runner):
        runner.client.run(function, *args, on_error="ignore")


def off_the_worker_pool() -> None:
    """On a Dask worker, leave its thread pool (``distributed.secede``, as Dask advises for a
    task that waits on something else): a model call waits on the service, not the CPU, so
    the requests in flight are those the run's pace admits (up to ``--concurrency``), not one
    per worker thread, and the worker's thread takes the next task meanwhile. Elsewhere
    (the thread runner, this process), nothing."""
    try:
        from distributed import get_worker, secede
    except ImportError:  # pragma: no cover - a dependency of memkiln
        return
    try:
        get_worker()
    except ValueError:  # not in a Dask worker's task
        return
    secede()  # type: ignore[no-untyped-call]  # distributed has no annotations here


def _is_dask(runner: Any) -> bool:
    return any(c.__name__ == "DaskTaskRunner" for c in type(runner).__mro__)


def parallelism(runner: Any) -> int:
    """How many tasks the flow keeps in flight on ``runner`` while it writes a result: one
    per Dask worker thread (so every worker is busy while the writer writes), else one (the
    next batch is prepared while the current one is written)."""
    if not _is_dask(runner):
        return 1
    try:
        client = runner.client  # starts the local cluster, or connects to the scheduler
    except OSError as exc:
        where = getattr(runner, "address", None) or "the local cluster"
        raise ConfigError(f"cannot reach the Dask scheduler at {where}: {exc}") from exc
    threads = sum(client.nthreads().values())
    return max(1, int(threads))


def current_runner() -> Any | None:
    """The task runner of the flow run this code is part of, or None outside a flow."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    return context.task_runner if context is not None else None


@contextmanager
def stopped_with(runner: Any) -> Iterator[None]:
    """Within the block, a hard exit of this process (a second signal, or a stop once the
    Prefect server is gone: ``memkiln.io.signals``) first ends the worker processes of a
    local Dask cluster this run started; a normal end, or an error, closes the cluster
    through the task runner itself. Its workers stop logging a heartbeat that found the
    scheduler closed (``quiet_heartbeat_after_scheduler``), and its nannies a worker killed
    because it was slow to exit (``quiet_worker_killed_at_close``): races of the cluster's
    close on a loaded machine."""
    pids = _local_worker_pids(runner)
    if not pids:
        yield
        return
    runner.client.run(quiet_heartbeat_after_scheduler)
    quiet_worker_killed_at_close()
    from memkiln.io.signals import interruptible

    with interruptible(on_hard_exit=lambda: _terminate(pids)):
        yield


def _local_worker_pids(runner: Any) -> list[int]:
    if not _is_dask(runner) or getattr(runner, "address", None):
        return []
    return [int(pid) for pid in runner.client.run(os.getpid).values()]


class _HeartbeatAfterScheduler(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != HEARTBEAT_AFTER_SCHEDULER


def quiet_heartbeat_after_scheduler() -> None:
    """In a worker process of a local cluster: drop ``HEARTBEAT_AFTER_SCHEDULER`` (only that
    record; the worker's other messages stay), and ``TASK_CANCELLED`` (a stopped run's tasks
    are cancelled on purpose). Idempotent."""
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _HeartbeatAfterScheduler) for f in logger.filters):
        logger.addFilter(_HeartbeatAfterScheduler())
    machine = logging.getLogger("distributed.worker.state_machine")
    if not any(isinstance(f, _TaskCancelled) for f in machine.filters):
        machine.addFilter(_TaskCancelled())


class _TaskCancelled(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith(TASK_CANCELLED[0]) and message.endswith(TASK_CANCELLED[1]))


class _WorkerKilledAtClose(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(WORKER_KILLED_AT_CLOSE)


def quiet_worker_killed_at_close() -> None:
    """In the flow's process: drop the nannies' ``WORKER_KILLED_AT_CLOSE`` (only that record;
    their other messages stay). Idempotent."""
    logger = logging.getLogger("distributed.nanny")
    if not any(isinstance(f, _WorkerKilledAtClose) for f in logger.filters):
        logger.addFilter(_WorkerKilledAtClose())


def _terminate(pids: list[int]) -> None:
    for pid in pids:
        with suppress(OSError):  # already gone
            os.kill(pid, signal.SIGTERM)
