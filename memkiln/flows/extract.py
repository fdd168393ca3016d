"""Phase 1, stage-one extraction: one job per eligible session, exactly once per version.

1. open the store, record the run, take over jobs left by a run that died (and record the
   answers of batches that ended, with openai-batch)
2. select candidates (pure decisions over rollouts and jobs)
3. a dry run estimates; openai-batch submits one batch; otherwise, for each session: build
   the request (kept items, rendered, budgeted), skip it when this exact input already has
   an output, else claim the job and ask the backend, with bounded concurrency; each outcome
   is written as soon as it arrives
4. close the backend, record the usage; the run closes with its counts

The steps are the methods of ``memkiln.llm.engine.Extraction``. Readers see the store as
published at the start, after batches of outcomes (no more often than every few seconds) and
at the end (``memkiln.io.snapshot``).

Under Prefect, the work of step 3 that needs no store runs as tasks on the flow's task runner
(Dask workers included, ``memkiln.llm.units``): a ``render-sessions`` task per chunk of
sessions (their requests rendered; the heuristic backend's outcomes with them) and, with a
model backend, a ``call-model`` task per request (sent, the answer parsed and judged). This
process reads, claims, decides what is sent and writes every outcome as it arrives.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
import concurrent.futures
import itertools
import uuid
from contextlib import AbstractContextManager, suppress
from functools import cached_property
from typing import Any

import duckdb
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from memkiln.flows.ephemeral import stoppable
from memkiln.io.artifacts import phase_of, publish
from memkiln.io.jobs import Outcome, store_write_error
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.runner import current_runner, on_workers, parallelism, stopped_with
from memkiln.io.store import open_store, recorded_run
from memkiln.llm.backends import HEURISTIC_MODEL, Backend, Request, make_backend
from memkiln.llm.engine import Extraction, Plan, policy_from
from memkiln.llm.units import (
    Dispatch,
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
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import ExtractSummary, extract_section, notes


def extract_store(
    settings: Settings,
    *,
    reporter: Reporter | None = None,
    backend: Backend | None = None,
    spent_before: float = 0.0,
    dispatch: Dispatch | None = None,
) -> ExtractSummary:
    """Run stage one over the store (no Prefect; the flow below wraps this).

    ``spent_before`` is what earlier phases of the same invocation spent, counted against
    ``budget_usd``; ``dispatch`` runs the rendering and the model calls elsewhere (tasks),
    else here.
    """
    reporter = reporter or Reporter(enabled=False)
    rules = load_rules()
    book = PriceBook(settings.prices)
    name = settings.backend
    model = HEURISTIC_MODEL if name == "heuristic" else settings.model
    check_budget_prices(book, backend=name, model=model, budget=settings.budget_usd)
    backend = backend or make_backend(settings, rules=rules)
    # 1. open the store and record the run
    con = open_store(settings.db)
    summary = ExtractSummary()
    plan = Plan(policy_from(settings), book, spent_before)
    try:
        with recorded_run(con, command="extract", counts=summary.counters) as summary.run_id:
            engine = Extraction(
                con,
                settings,
                backend,
                rules=rules,
                summary=summary,
                reporter=reporter,
                plan=plan,
                dispatch=dispatch,
            )
            try:
                asyncio.run(_extract(engine))
            except BaseException as exc:  # a stop: the record below hands back the jobs held
                engine.dispatch.stop()  # the calls in flight end, nothing more is sent
                engine.fence()
                if not isinstance(exc, duckdb.Error):  # answers that came are kept
                    with suppress(duckdb.Error):
                        engine.keep_finished()
                raise
    except duckdb.Error as exc:  # the store cannot be written (a full disk, a lost mount)
        raise store_write_error(settings.db, exc) from exc
    finally:
        con.close()
    return summary


async def _extract(engine: Extraction) -> None:
    # 1. jobs left running by a dead run go back to pending; ended batches are applied
    await engine.take_over()
    # 2. select (the jobs of open batches are held by them)
    decided, todo = await engine.select()
    # 3. count and estimate (a dry run: no job claimed, no model called), or submit one
    # batch (openai-batch), or send the requests with bounded concurrency
    if engine.settings.dry_run:
        await engine.estimate(decided, todo)
    elif engine.batch is not None:
        await engine.submit_batch(todo)
    else:
        await engine.send(todo)
    # 4. close the backend; record what the run's requests used
    await engine.close()


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
    them): pure work, Arrow IPC in, JSON-able dicts out."""
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
    as a task: a request is charged once; the client retries 429 and 5xx itself)."""
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
        future = render_sessions_task.submit(
            group_to_wire(group), self.options, next(self._numbers)
        )
        return [ready_from_wire(wire) for wire in future.result()]

    async def call(self, request: Request) -> Outcome:
        wire = request_to_wire(request) | {"run": self.run}
        future = call_model_task.submit(wire, self.options, next(self._numbers))
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


@task(
    name="extract-sessions",
    task_run_name="extract with {options.backend}",
    cache_policy=NO_CACHE,
)
def extract_task(
    options: Options, parent_run_id: str | None = None, spent_before: float = 0.0
) -> ExtractSummary:
    """Stage one over the eligible sessions whose output is not up to date."""
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        reporter = Reporter(enabled=options.progress)
        return extract_store(
            settings, reporter=reporter, spent_before=spent_before, dispatch=Tasks(options)
        )


@flow(name="memkiln-extract")
def extract_flow(options: Options) -> ExtractSummary:
    """Stage one over the sessions in the store."""
    with hold_store(options.db), stoppable():
        summary = extract_task(options)
    publish("memkiln extract", [extract_section(summary)], notes(extract=summary))
    return summary
