"""Extraction's send loop (step 3 of ``memkiln.pipeline.extract`` without a dry run or the
Batch API): sessions are prepared a group at a time in worker threads (read and claimed in
the store, then rendered into requests by the run's dispatch) while the loop sends those
already prepared, each request through the dispatch too; each outcome is buffered and
written in small batches by a worker thread (no more often than every few seconds), and
readers see the outcomes written so far (``memkiln.io.snapshot``).

What the loop decides, it asks of small records with no I/O (``memkiln.transforms.sending``):

- the pace (``memkiln.llm.ratelimit.Pace``, one per run, whatever runs the calls) admits
  each request when the service's rate limits leave room for it; a request the service
  refused for a rate limit goes again once admitted;
- the budget (``Budget``) is a hard cap: each request's worst case (its input tokens and
  every output token it may ask for) is reserved before it is sent, and the unused part
  released when it answers; a request that does not fit waits for those in flight, and the
  run stops sending when it still does not fit with nothing in flight;
- the run stops sending when the service fails many requests in a row (``Streak``);
- a group is prepared only while what the sessions being prepared and in flight hold fits
  within ``HELD_IN_FLIGHT_CHARS`` (``Holding``), so that, whatever the concurrency, a run of
  large chunked sessions holds a bounded number of them.

Claimed sessions not sent go back to pending.
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
import time
from collections import Counter, deque
from collections.abc import Callable
from contextlib import closing, nullcontext
from datetime import datetime
from functools import partial
from typing import Protocol

import duckdb
import polars as pl

from memkiln.constants import (
    FLUSH_OUTCOMES,
    FLUSH_SECONDS,
    GROUP_HELD_CHARS,
    HELD_IN_FLIGHT_CHARS,
    PREPARE_GROUP,
)
from memkiln.errors import Interrupted
from memkiln.io.progress import Reporter
from memkiln.io.signals import stop_request
from memkiln.io.snapshot import Publisher
from memkiln.io.store import cursor as store_cursor
from memkiln.llm.backends import Backend, DaemonThreads, Request
from memkiln.llm.ratelimit import TRIES_PER_REQUEST, Pace, Seen
from memkiln.llm.requests import request_tokens
from memkiln.llm.units import Dispatch, Ready, internal_error
from memkiln.settings import Settings
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.sending import Budget, Holding, Streak
from memkiln.transforms.session_window import by_size
from memkiln.transforms.states import Finished, Outcome, OutcomeKind
from memkiln.transforms.summaries import ExtractSummary

#: Groups prepared ahead at most, whatever the task runner's workers.
MAX_AHEAD = 16

#: A group of sessions made ready to send: their requests (with the outcome, when rendering
#: produced it), and each one's claimed attempt.
Prepared = tuple[list[Ready], dict[str, int]]


class Steps(Protocol):
    """What the send loop uses of its run (``memkiln.pipeline.extract_steps.Extraction``)."""

    con: duckdb.DuckDBPyConnection
    settings: Settings
    summary: ExtractSummary
    backend: Backend
    rules: RuleSet
    dispatch: Dispatch
    reporter: Reporter
    #: ``(rollout_id, input_hash)`` of outputs that can be reused
    reusable: set[tuple[str, str]]
    #: finished attempts not written yet
    buffer: list[Finished]
    #: this run's outcome counts (``failed:rate_limited`` etc.)
    outcomes: Counter[str]

    def prepare(self, group: pl.DataFrame, publisher: Publisher) -> Prepared: ...
    def held_sizes(self, ids: list[str]) -> dict[str, int]: ...
    def worst_cost(self, request: Request) -> float: ...
    def release_unsent(self, streak: list[str]) -> int: ...
    def record(self, cur: duckdb.DuckDBPyConnection, done: list[Finished]) -> None: ...
    def count(self, done: list[Finished]) -> None: ...
    def failed(self) -> int: ...


class Sender:
    """One run's send loop over the sessions to extract, on the run's ``steps`` (its store,
    settings, summary, dispatch and outcome counts), within ``budget``."""

    def __init__(self, steps: Steps, budget: Budget) -> None:
        self.steps = steps
        self.settings = steps.settings
        self.summary = steps.summary
        self.budget = budget
        self._released = asyncio.Event()  # a request in flight ended: its reservation freed
        #: the run's one controller of its pace against the service's rate limits
        self.pace = Pace(self.settings.concurrency)
        self.streak = Streak.for_concurrency(self.settings.concurrency)
        #: when a batch of buffered outcomes was last written
        self.last_flush = time.monotonic()
        # a stop request that surfaced inside a request's task (the signal's exception is
        # raised wherever the main thread is, also in a task's step, where asyncio keeps it
        # in the task): the sending loop is cancelled and raises it (``_stop_sending``)
        self.stopping: Interrupted | None = None
        self._sending: asyncio.Task[None] | None = None
        #: the groups being prepared (set by ``send``)
        self._ahead: Ahead | None = None

    async def send(self, todo: pl.DataFrame) -> None:
        """Ask the backend for every session of ``todo``, at most ``concurrency`` requests
        at a time, within the budget; outcomes are written in small batches as they come."""
        self._sending = asyncio.current_task()
        try:
            await self._send(todo)
        except asyncio.CancelledError:
            if self.stopping is not None:  # the stop, caught in a request's task
                raise self.stopping from None
            raise

    def _stop_sending(self, stop: Interrupted) -> None:
        if self.stopping is None:
            self.stopping = stop
            if self._sending is not None:
                self._sending.cancel()

    async def _send(self, todo: pl.DataFrame) -> None:
        steps, settings, summary = self.steps, self.settings, self.summary
        slots = asyncio.Semaphore(settings.concurrency)
        writer = asyncio.Lock()  # one batch of outcomes written at a time, in order
        # readers see the outcomes written so far; the worker threads' store work is kept
        # apart from its copies
        publisher = Publisher(steps.con)
        running: list[asyncio.Task[None]] = []  # kept until gathered, so an error surfaces
        # the first group only fills the slots, so that sending starts as soon as it can
        head = todo.head(settings.concurrency)
        rest = todo.slice(head.height).iter_slices(max(PREPARE_GROUP, settings.concurrency * 4))
        groups = [head, *rest] if head.height else []
        # and no group holds more than GROUP_HELD_CHARS of kept items (but one session)
        held = await asyncio.to_thread(steps.held_sizes, todo["rollout_id"].to_list())
        groups = [part for group in groups for part in _by_size(group, held)]
        prepare = lambda group: steps.prepare(group, publisher)  # noqa: E731
        # and what the sessions being prepared or in flight hold stays within a bound
        sizes = [{rid: held.get(rid, 0) for rid in g["rollout_id"]} for g in groups]
        depth = steps.dispatch.ahead if groups else 1
        ahead = Ahead(groups, prepare, depth=depth, sizes=sizes)
        self._ahead = ahead
        dispatching = steps.dispatch.running() if groups else nullcontext()
        with (
            dispatching,
            steps.reporter.task("extract", total=todo.height, unit="sessions") as advance,
            closing(ahead),
        ):
            ahead.next()
            for group in groups:
                # the group's requests are held by ``_send_group`` only: once it returns,
                # those that ended are let go of while the next group is prepared
                await self._send_group(
                    group, *await ahead.take(), slots, writer, publisher, advance, running
                )
                if summary.stopped:
                    break
                ahead.next()
                await self._flush(writer, publisher)
            await ahead.drain()  # claimed while the run stopped: released below
            if running:
                await asyncio.gather(*running)
        await self._flush(writer, publisher, force=True)
        if summary.stopped:  # claimed jobs not sent go back to pending, with the unclaimed rest
            await asyncio.to_thread(steps.release_unsent, self.streak.ids)
            left = todo.height - sum(steps.outcomes.values())
            summary.stopped += f"; {left:,} sessions left pending for the next run"
        summary.outcomes = dict(steps.outcomes)
        summary.sessions_failed = steps.failed()

    async def _send_group(
        self,
        group: pl.DataFrame,
        prepared: list[Ready],
        attempts: dict[str, int],
        slots: asyncio.Semaphore,
        writer: asyncio.Lock,
        publisher: Publisher,
        advance: Callable[[int], None],
        running: list[asyncio.Task[None]],
    ) -> None:
        """Send the requests of a prepared group (an output that can be reused is recorded
        without one), each in a task of its own added to ``running``, as slots free up."""
        steps, summary, ahead = self.steps, self.summary, self._ahead
        assert ahead is not None, "send() sets the groups being prepared"
        watermarks = dict(group.iter_rows())
        for rid in set(watermarks) - {ready.request.rollout_id for ready in prepared}:
            ahead.let_go(rid)  # no request (nothing to send): nothing held
        for ready in prepared:
            request = ready.request
            rid = request.rollout_id
            if (rid, request.input_hash) in steps.reusable:
                reused = Outcome(rid, OutcomeKind.REUSED, input_hash=request.input_hash)
                steps.buffer.append(Finished(reused, watermarks[rid], attempts[rid]))
                ahead.let_go(rid)
                advance(1)
                continue
            # every slot busy: the next group is prepared while these requests wait, not
            # while the first ones of this group are being sent
            if slots.locked():
                ahead.next()
            await slots.acquire()
            if summary.stopped or not await self._reserve(request):
                slots.release()
                return
            one = self._send_one(
                ready, watermarks[rid], attempts[rid], slots, writer, publisher, advance
            )
            running.append(asyncio.create_task(one))

    async def _reserve(self, request: Request) -> bool:
        """Reserve the request's worst-case cost within the budget; while it does not fit,
        wait for the requests in flight to answer (each releases what it did not use).
        False, and the run stops, when it does not fit with none in flight."""
        summary, budget = self.summary, self.budget
        if budget.limit is None:
            return True
        cost = self.steps.worst_cost(request)
        while summary.stopped is None:
            if budget.reserve(request.rollout_id, cost):
                summary.reserved_usd = max(summary.reserved_usd, budget.most_reserved)
                return True
            if not budget.in_flight:
                summary.budget_reached = True
                summary.stopped = budget.reached(cost)
                return False
            self._released.clear()
            await self._released.wait()
        return False

    async def _send_one(
        self,
        ready: Ready,
        watermark: datetime,
        attempt: int,
        slots: asyncio.Semaphore,
        writer: asyncio.Lock,
        publisher: Publisher,
        advance: Callable[[int], None],
    ) -> None:
        summary = self.summary
        request = ready.request
        try:
            result = ready.outcome
            if result is None:
                result = await self._call(request)
        except BaseException as exc:
            # a cancellation is the run's own unwinding (asyncio.run ending), not a stop
            stop = None if isinstance(exc, asyncio.CancelledError) else stop_in(exc)
            if stop is not None:  # the process was asked to stop while this task ran
                self._stop_sending(stop)
                raise
            if not isinstance(exc, Exception):
                raise
            # a bug (or a lost worker) must not stop the batch: go on
            result = internal_error(request, exc, rules=self.steps.rules)
        finally:
            self.budget.release(request.rollout_id)
            slots.release()
            if self._ahead is not None:
                self._ahead.let_go(request.rollout_id)
        self.budget.settle(request.rollout_id, result.cost_usd or 0.0)
        self._released.set()
        summary.requests += result.requests
        why = self.streak.note(result, stopped=summary.stopped is not None)
        if why is not None:
            summary.stopped = why
        self.steps.buffer.append(Finished(result, watermark, attempt))
        advance(1)
        await self._flush(writer, publisher)

    async def _call(self, request: Request) -> Outcome:
        """Send ``request`` through the dispatch once the run's pace admits it (counted for
        its input and every output token it may ask for, as the service counts it); refused
        for a rate limit, it goes again once admitted, unless the run stops or the service
        keeps refusing (then its outcome is ``rate_limited``)."""
        requests, tokens_in, tokens_out = request_tokens(request, self.settings.max_output_tokens)
        tries = 0
        while True:
            ticket = await self.pace.admit(tokens_in + tokens_out, requests)
            tries += 1
            try:
                result = await self.steps.dispatch.call(request)
            except BaseException:
                self.pace.settle(ticket, None)
                raise
            again = self.pace.settle(
                ticket, Seen.from_wire(result.limits), started=result.started_at
            )
            if not again or tries >= TRIES_PER_REQUEST or self.summary.stopped is not None:
                return result
            self.summary.rate_limited += 1

    async def _flush(
        self, writer: asyncio.Lock, publisher: Publisher, *, force: bool = False
    ) -> None:
        """Write the buffered outcomes when enough are waiting or enough time has passed
        (``force``: now), in a worker thread, one batch at a time."""
        steps = self.steps
        waited = time.monotonic() - self.last_flush
        due = len(steps.buffer) >= FLUSH_OUTCOMES or waited > FLUSH_SECONDS
        if not steps.buffer or not (force or due):
            return
        batch = steps.buffer.copy()
        steps.buffer.clear()
        self.last_flush = time.monotonic()
        async with writer:
            await asyncio.to_thread(self._write, batch, publisher)
        steps.count(batch)

    def _write(self, batch: list[Finished], publisher: Publisher) -> None:
        # a worker thread: the loop goes on sending meanwhile
        with publisher.using(), store_cursor(self.steps.con) as cur:
            self.steps.record(cur, batch)
        publisher.maybe()


def _by_size(group: pl.DataFrame, held: dict[str, int]) -> list[pl.DataFrame]:
    """``group`` in runs of sessions holding at most ``GROUP_HELD_CHARS`` together."""
    runs = by_size(group["rollout_id"].to_list(), held, bound=GROUP_HELD_CHARS)
    if len(runs) == 1:
        return [group]
    parts, start = [], 0
    for run in runs:
        parts.append(group.slice(start, len(run)))
        start += len(run)
    return parts


def stop_in(exc: BaseException) -> Interrupted | None:
    """The stop request behind ``exc``: a signal's ``Interrupted`` itself, one in its
    chain (a serializer that wrapped it), or any error once a signal came (pydantic turns
    an exception raised inside a serializer into its own, keeping only the message)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Interrupted):
            return seen
        seen = seen.__cause__ or seen.__context__
    name = stop_request(exc)
    return None if name is None else Interrupted(signal.Signals[name], name)


class Ahead:
    """Groups of sessions prepared ahead, in order, in worker threads: at most ``depth`` on
    their way (one per worker of the task runner: their rendering runs side by side), and
    only while what the run's sessions hold fits in ``holding`` (``sizes``: each group's
    sessions' characters once read). A session's request that ended lets go of what it held
    (``let_go``), and the next group may start."""

    def __init__(
        self,
        groups: list[pl.DataFrame],
        prepare: Callable[[pl.DataFrame], Prepared],
        *,
        depth: int = 1,
        sizes: list[dict[str, int]] | None = None,
        holding: Holding | None = None,
    ):
        self._groups = groups
        self._prepare = prepare
        self._depth = max(1, min(depth, MAX_AHEAD))
        self._sizes = sizes or [{} for _ in groups]
        self._holding = holding or Holding(bound=HELD_IN_FLIGHT_CHARS)
        self._upcoming: deque[asyncio.Future[Prepared]] = deque()
        self._prepared = 0
        self._room = asyncio.Event()  # a session let go of what it held
        # threads of their own (the loop's default ones write the outcomes meanwhile), daemon
        # ones (an interrupted run does not wait for them), started with the first group
        self._threads: DaemonThreads | None = None

    def next(self) -> None:
        """Start preparing the next groups, up to ``depth`` on their way and while they fit."""
        while len(self._upcoming) < self._depth and self._prepared < len(self._groups):
            sizes = self._sizes[self._prepared]
            if not self._holding.fits(sizes):
                return
            self._holding.take(sizes)
            if self._threads is None:
                self._threads = DaemonThreads(self._depth, name="extract-prepare")
            group = self._groups[self._prepared]
            # the caller's context goes along (a Prefect flow run's, to submit tasks)
            call = partial(contextvars.copy_context().run, self._prepare, group)
            self._upcoming.append(asyncio.wrap_future(self._threads.submit(call)))
            self._prepared += 1

    def let_go(self, rollout_id: str) -> None:
        """``rollout_id``'s request ended, or will not be sent: the next group may fit (it is
        started by the loop, in ``next`` or ``take``, never by an ending request: a run that
        is stopping starts no group)."""
        self._holding.let_go(rollout_id)
        self._room.set()

    async def take(self) -> Prepared:
        """The next group's requests and attempts, once its preparation could start (what
        the sessions before it hold may have to be let go of first)."""
        assert self._prepared < len(self._groups) or self._upcoming, "no group left to take"
        while not self._upcoming:
            self._room.clear()
            self.next()
            if not self._upcoming:
                await self._room.wait()
        return await self._upcoming.popleft()

    async def drain(self) -> None:
        """Wait for the groups still being prepared (their claimed jobs are released
        later)."""
        while self._upcoming:
            await self._upcoming.popleft()

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
