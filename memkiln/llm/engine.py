"""The stage-one extraction engine: one run's state and the steps the extract flow calls in
order (``memkiln.pipeline.extract``): take over what a dead run left, select, then estimate (a
dry run), submit a batch (openai-batch) or send the requests with bounded concurrency, and
close.

Sending: sessions are prepared a chunk at a time in a worker thread (read and claimed in
the store, then rendered into requests by the run's dispatch: in this process, or as a
Prefect task on the flow's task runner, ``memkiln.llm.units``) while the loop sends those
already prepared, each request through the dispatch too; each outcome is buffered and
written in small batches by a worker thread (no more often than every few seconds), and
readers see the outcomes written so far (``memkiln.io.snapshot``). The store, the claims,
the budget, the pace, the reused outputs and the failures in a row stay with this process:

- the pace (``memkiln.llm.ratelimit.Pace``, one per run, whatever runs the calls) admits
  each request when the service's rate limits leave room for it; a request the service
  refused for a rate limit goes again once admitted;
- the budget is a hard cap: each request's worst case (its input tokens and every output
  token it may ask for) is reserved before it is sent, and the unused part released when it
  answers; a request that does not fit waits for those in flight, and the run stops sending
  when it still does not fit with nothing in flight;
- the run stops sending when the service fails many requests in a row.

Claimed sessions not sent go back to pending.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from contextlib import closing, nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as datetime_time
from functools import partial

import duckdb
import polars as pl

from memkiln.constants import FLUSH_OUTCOMES, FLUSH_SECONDS, PREPARE_CHUNK
from memkiln.errors import Interrupted
from memkiln.io.jobs import (
    Finished,
    Outcome,
    claim_many,
    finish_many,
    load_selection_inputs,
    record_decisions,
    release_orphans,
    release_unsent,
    reusable_outputs,
    uncharge,
)
from memkiln.io.prices import PriceBook
from memkiln.io.progress import Reporter
from memkiln.io.signals import stop_request
from memkiln.io.snapshot import Publisher
from memkiln.io.store import cursor as store_cursor
from memkiln.io.store import now, sql
from memkiln.io.usage import past_output, record_estimate, record_usage
from memkiln.llm.backends import Backend, DaemonThreads, Request
from memkiln.llm.batch import Item as BatchItem
from memkiln.llm.batch import OpenAIBatchBackend, mark_applied, open_owners, poll, submit
from memkiln.llm.ratelimit import TRIES_PER_REQUEST, Pace, Seen
from memkiln.llm.requests import build_requests, read_sessions, request_tokens
from memkiln.llm.units import Dispatch, Group, Local, Ready, internal_error
from memkiln.settings import Settings
from memkiln.transforms.estimate import (
    DEFAULT_STAGE_ONE_OUTPUT_TOKENS,
    Estimate,
    OutputBasis,
    expected_output_tokens,
)
from memkiln.transforms.prompts import STAGE_ONE_PROMPT_VERSION
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.selection import SelectionPolicy, run_wide_failure_limit, select_candidates
from memkiln.transforms.states import (
    NOT_ELIGIBLE,
    RETRY_NOW_REASONS,
    Decision,
    FailureReason,
    OutcomeKind,
)
from memkiln.transforms.summaries import ExtractSummary

#: Chunks prepared ahead at most, whatever the task runner's workers.
MAX_AHEAD = 16

#: A chunk of sessions made ready to send: their requests (with the outcome, when rendering
#: produced it), and each one's claimed attempt.
Prepared = tuple[list[Ready], dict[str, int]]


@dataclass(frozen=True)
class Plan:
    """How a run selects and what it may spend."""

    policy: SelectionPolicy
    prices: PriceBook
    spent_before: float = 0.0


def policy_from(settings: Settings) -> SelectionPolicy:
    return SelectionPolicy(
        sources=tuple(settings.sources),
        max_rollout_age_days=settings.max_rollout_age_days,
        min_rollout_idle_hours=settings.min_rollout_idle_hours,
        max_rollouts_per_run=settings.max_rollouts_per_run,
        retry_budget=settings.retry_budget,
        backfill=settings.backfill,
        since=day_start(settings.since),
        until=day_start(settings.until, days_after=1),
    )


def day_start(day: date | None, *, days_after: int = 0) -> datetime | None:
    """Midnight UTC of ``day`` (plus ``days_after`` days): ``until`` includes its own day."""
    if day is None:
        return None
    try:
        return datetime.combine(day, datetime_time(0), tzinfo=UTC) + timedelta(days=days_after)
    except OverflowError:  # the day after 9999-12-31: no later time, so no limit
        return None


class Extraction:
    """One extraction run over an open store: its settings, backend and summary, and what the
    steps share (this run's outcome counts, the outputs it may reuse, the expected output
    tokens of a request, the spend)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        settings: Settings,
        backend: Backend,
        *,
        rules: RuleSet,
        summary: ExtractSummary,
        reporter: Reporter,
        plan: Plan,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.con = con
        self.settings = settings
        self.backend = backend
        self.rules = rules
        self.summary = summary
        self.reporter = reporter
        self.plan = plan
        #: where rendering and model calls run (this process by default)
        self.dispatch = dispatch or Local(backend, settings=settings, rules=rules)
        #: the Batch API backend, when it is the one (its requests go in batches)
        self.batch = backend if isinstance(backend, OpenAIBatchBackend) else None
        #: set by ``select``: ``(rollout_id, input_hash)`` of outputs that can be reused, and
        #: the output tokens to expect of one request
        self.reusable: set[tuple[str, str]] = set()
        self._reusable_by: dict[str, frozenset[str]] | None = None
        self.out_each = DEFAULT_STAGE_ONE_OUTPUT_TOKENS
        self.past_output: float | None = None
        self.past_answers = 0
        #: outcomes of the requests this run sent (``failed:rate_limited`` etc.)
        self.outcomes: Counter[str] = Counter()
        # the budget: what this invocation spent before this phase and what this run spent,
        # and the estimated cost of each request in flight
        self.spent = plan.spent_before
        summary.budget_usd = settings.budget_usd
        summary.spent_before_usd = plan.spent_before
        self.in_flight: dict[str, float] = {}
        self._released = asyncio.Event()  # a request in flight ended: its reservation freed
        #: the run's one controller of its pace against the service's rate limits
        self.pace = Pace(settings.concurrency)
        # failures of the service (endpoint down, key refused, every request rate-limited,
        # 5xx or timing out) in a row; at the limit the run stops sending and leaves the rest
        # pending, and the sessions of the streak get back the attempts it used
        self.streak: list[str] = []
        self.failure_limit = run_wide_failure_limit(settings.concurrency)
        # finished attempts not written yet, and when a batch of them was last written
        self.buffer: list[Finished] = []
        self.last_flush = time.monotonic()
        # the cost of every finished attempt (their total is the run's cost)
        self.costs: list[float] = []
        # chunks prepared side by side read and claim in the store one at a time; once the
        # run stops, none claims any more (``fence``)
        self.claiming = threading.Lock()
        self.fenced = False
        # a stop request that surfaced inside a request's task (the signal's exception is
        # raised wherever the main thread is, also in a task's step, where asyncio keeps it
        # in the task): the sending loop is cancelled and raises it (``_stop_sending``)
        self.stopping: Interrupted | None = None
        self._sending: asyncio.Task[None] | None = None

    # -- 1. take over ------------------------------------------------------------------------

    async def take_over(self) -> None:
        """Jobs left running by a dead run go back to pending; the answers of batches that
        ended since the last run are recorded first (openai-batch)."""
        self.summary.orphans_taken_over = release_orphans(self.con, run_id=self.summary.run_id)
        if self.batch is not None and not self.settings.dry_run:
            await asyncio.to_thread(self._apply_batches, self.batch)

    def _apply_batches(self, backend: OpenAIBatchBackend) -> None:
        """Record the outcomes of the batches that ended since the last run."""
        with store_cursor(self.con) as cur:
            finished, self.summary.batches_open = poll(cur, backend)
            # in the same transaction: a batch is applied exactly once, even if the run is
            # killed while its outcomes are written
            self._record(cur, finished, also=mark_applied)
        self._count(finished)
        self.summary.outcomes = dict(self.outcomes)
        self.summary.sessions_failed = self._failed()

    # -- 2. select ---------------------------------------------------------------------------

    async def select(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Decide for every session (pure decisions over rollouts and jobs; the jobs of open
        batches are held by them) and record the decisions; returns them and the sessions
        to extract (``rollout_id``, ``updated_at``)."""
        backend, summary = self.backend, self.summary
        rollouts, jobs = load_selection_inputs(self.con)
        decided = select_candidates(
            rollouts.lazy(),
            jobs.lazy(),
            now=now(),
            policy=self.plan.policy,
            live_owners=(summary.run_id, *open_owners(self.con)),
            producer=(backend.name, backend.model, STAGE_ONE_PROMPT_VERSION),
        ).collect()
        summary.considered = decided.height
        summary.decisions = dict(Counter(decided["decision"].to_list()))
        await asyncio.to_thread(self._record_decisions, decided)
        todo = decided.filter(pl.col("decision") == Decision.TAKE).select(
            "rollout_id", "updated_at"
        )
        summary.taken = todo.height
        self.reusable = reusable_outputs(
            self.con, prompt_version=STAGE_ONE_PROMPT_VERSION, model=backend.model
        )
        past, self.past_answers = past_output(
            self.con, phase="extract", model=backend.model, prompt_version=STAGE_ONE_PROMPT_VERSION
        )
        self.past_output = past
        self.out_each = expected_output_tokens(
            past, default=DEFAULT_STAGE_ONE_OUTPUT_TOKENS, limit=self.settings.max_output_tokens
        )
        return decided, todo

    def _record_decisions(self, decided: pl.DataFrame) -> None:
        with store_cursor(self.con) as cur:
            record_decisions(cur, decided, run_id=self.summary.run_id)

    # -- 3a. a dry run -----------------------------------------------------------------------

    async def estimate(self, decided: pl.DataFrame, todo: pl.DataFrame) -> None:
        """Count and estimate; no job is claimed, no model called."""
        estimate = await asyncio.to_thread(self._estimate, decided, todo)
        with store_cursor(self.con) as cur:
            record_estimate(cur, run_id=self.summary.run_id, estimate=estimate)
        self.summary.estimate = estimate

    def _estimate(self, decided: pl.DataFrame, todo: pl.DataFrame) -> Estimate:
        """The sessions found, eligible, done and to do, and the requests the real run would
        send, built and counted exactly as it builds them (reused outputs and requests over
        the model's window are not sent)."""
        settings, backend = self.settings, self.backend
        counts = Counter(decided["decision"].to_list())
        estimate = Estimate(
            sessions_found=decided.height,
            sessions_eligible=decided.height - sum(counts[r] for r in NOT_ELIGIBLE),
            sessions_done=counts[Decision.UP_TO_DATE],
            sessions_to_do=todo.height,
        )
        requests = tokens_in = tokens_out = 0
        if backend.name != "heuristic":  # the heuristic backend sends no request
            with store_cursor(self.con) as cur:
                for chunk in todo.iter_slices(PREPARE_CHUNK * 4):
                    built = build_requests(
                        cur, chunk, settings=settings, rules=self.rules, chunked=True
                    )
                    for request in built:
                        if (request.rollout_id, request.input_hash) in self.reusable:
                            continue
                        window = settings.context_window
                        reserve = settings.max_output_tokens
                        prompts = request.parts or (request.prompt,)
                        if window and any(p.tokens_needed(reserve, window) for p in prompts):
                            continue
                        n, tokens, out = request_tokens(request, self.out_each)
                        requests += n
                        tokens_in += tokens
                        tokens_out += out
        estimate.output_basis["extract"] = OutputBasis(
            self.out_each, self.past_output, self.past_answers, DEFAULT_STAGE_ONE_OUTPUT_TOKENS
        )
        estimate.add(
            "extract",
            backend.name,
            backend.model,
            requests=requests,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost=self.plan.prices.cost(backend.name, backend.model, tokens_in, tokens_out),
        )
        return estimate

    # -- 3b. openai-batch --------------------------------------------------------------------

    async def submit_batch(self, todo: pl.DataFrame) -> None:
        """Send this run's sessions as one batch of the Batch API."""
        assert self.batch is not None, "submit_batch needs the openai-batch backend"
        await asyncio.to_thread(self._submit_batch, self.batch, todo)

    def _submit_batch(self, backend: OpenAIBatchBackend, todo: pl.DataFrame) -> None:
        """Send this run's sessions as one batch (within the budget); outputs that can be
        reused and requests over the window are recorded at once. A session over the budget
        is extracted in chunks through the ordinary request path now (at the ordinary price),
        not in the batch: its merge request needs the chunks' answers first."""
        settings, summary = self.settings, self.summary
        items: list[BatchItem] = []
        now_done: list[Finished] = []
        estimate = self.plan.spent_before + summary.cost_usd
        with store_cursor(self.con) as cur:
            for chunk in todo.iter_slices(PREPARE_CHUNK * 4):
                if summary.budget_reached:
                    break
                requests = build_requests(
                    cur, chunk, settings=settings, rules=self.rules, chunked=True
                )
                attempts = claim_many(
                    cur, chunk, run_id=summary.run_id, lease_seconds=settings.lease_seconds
                )
                watermarks = dict(chunk.iter_rows())
                for request in requests:
                    rid = request.rollout_id
                    reused = Outcome(rid, OutcomeKind.REUSED, input_hash=request.input_hash)
                    done = Finished(reused, watermarks[rid], attempts[rid])
                    window = settings.context_window
                    needed = window and request.prompt.tokens_needed(
                        settings.max_output_tokens, window
                    )
                    if (rid, request.input_hash) in self.reusable:
                        now_done.append(done)
                        continue
                    if needed:
                        failed = Outcome(
                            rid,
                            OutcomeKind.FAILED,
                            reason=FailureReason.CONTEXT_OVERFLOW,
                            detail=f"{needed} tokens needed, window {window}",
                            input_hash=request.input_hash,
                        )
                        now_done.append(Finished(failed, watermarks[rid], attempts[rid]))
                        continue
                    # the worst case: every output token the request may ask for
                    _, tokens_in, tokens_out = request_tokens(request, self._most_out())
                    priced_as = "openai" if request.parts else backend.name  # chunks: not batched
                    cost = self.plan.prices.cost(priced_as, backend.model, tokens_in, tokens_out)
                    cost = cost or 0.0
                    budget = settings.budget_usd
                    if budget is not None and estimate + cost > budget:
                        summary.budget_reached = True
                        summary.stopped = (
                            f"budget of ${budget:,.2f} reached: the batch holds "
                            f"{len(items):,} requests (~${estimate:,.4f} with the spend so far)"
                        )
                        break
                    estimate += cost
                    if request.parts:  # chunks, then their merge: not in one batch
                        sent = asyncio.run(backend.extract_parts(request))
                        summary.requests += sent.requests
                        now_done.append(Finished(sent, watermarks[rid], attempts[rid]))
                        continue
                    items.append(BatchItem(request, watermarks[rid], attempts[rid]))
            if items and not submit(cur, backend, items, run_id=summary.run_id):
                summary.batches_open += 1  # uploaded and held: the next run creates it
            self._record(cur, now_done)
            release_unsent(cur, run_id=summary.run_id)
        summary.requests += len(items)
        summary.batched = len(items)
        self._count(now_done)
        summary.outcomes = dict(self.outcomes)
        summary.sessions_failed = self._failed()

    # -- 3c. requests, with bounded concurrency ----------------------------------------------

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
        settings, summary = self.settings, self.summary
        slots = asyncio.Semaphore(settings.concurrency)
        writer = asyncio.Lock()  # one batch of outcomes written at a time, in order
        # readers see the outcomes written so far; the worker threads' store work is kept
        # apart from its copies
        publisher = Publisher(self.con)
        running: list[asyncio.Task[None]] = []  # kept until gathered, so an error surfaces
        # the first chunk only fills the slots, so that sending starts as soon as it can
        head = todo.head(settings.concurrency)
        rest = todo.slice(head.height).iter_slices(max(PREPARE_CHUNK, settings.concurrency * 4))
        chunks = [head, *rest] if head.height else []
        prepare = lambda chunk: self._prepare(chunk, publisher)  # noqa: E731
        ahead = _Ahead(chunks, prepare, depth=self.dispatch.ahead if chunks else 1)
        dispatching = self.dispatch.running() if chunks else nullcontext()
        with (
            dispatching,
            self.reporter.task("extract", total=todo.height, unit="sessions") as advance,
            closing(ahead),
        ):
            ahead.next()
            for chunk in chunks:
                prepared, attempts = await ahead.take()
                watermarks = dict(chunk.iter_rows())
                for ready in prepared:
                    request = ready.request
                    rid = request.rollout_id
                    if (rid, request.input_hash) in self.reusable:
                        reused = Outcome(rid, OutcomeKind.REUSED, input_hash=request.input_hash)
                        self.buffer.append(Finished(reused, watermarks[rid], attempts[rid]))
                        advance(1)
                        continue
                    # every slot busy: the next chunk is prepared while these requests wait,
                    # not while the first ones of this chunk are being sent
                    if slots.locked():
                        ahead.next()
                    await slots.acquire()
                    if summary.stopped or not await self._reserve(request):
                        slots.release()
                        break
                    one = self._send_one(
                        ready, watermarks[rid], attempts[rid], slots, writer, publisher, advance
                    )
                    running.append(asyncio.create_task(one))
                if summary.stopped:
                    break
                ahead.next()
                await self._flush(writer, publisher)
            await ahead.drain()  # claimed while the run stopped: released below
            if running:
                await asyncio.gather(*running)
        await self._flush(writer, publisher, force=True)
        if summary.stopped:  # claimed jobs not sent go back to pending, with the unclaimed rest
            await asyncio.to_thread(self._release_unsent)
            left = todo.height - sum(self.outcomes.values())
            summary.stopped += f"; {left:,} sessions left pending for the next run"
        summary.outcomes = dict(self.outcomes)
        summary.sessions_failed = self._failed()

    def _most_out(self) -> int:
        """The output tokens a request may ask for at most."""
        return max(self.settings.max_output_tokens, self.out_each)

    async def _reserve(self, request: Request) -> bool:
        """Reserve the request's worst-case cost (its input and every output token it may
        ask for) within the budget, with what was spent and what is reserved in flight;
        while it does not fit, wait for the requests in flight to answer (each releases what
        it did not use). False, and the run stops, when it does not fit with none in flight."""
        summary, budget = self.summary, self.settings.budget_usd
        if budget is None:
            return True
        _, tokens_in, tokens_out = request_tokens(request, self._most_out())
        backend = self.backend
        cost = self.plan.prices.cost(backend.name, backend.model, tokens_in, tokens_out) or 0.0
        while summary.stopped is None:
            reserved = math.fsum(self.in_flight.values())
            if self.spent + reserved + cost <= budget:
                self.in_flight[request.rollout_id] = cost
                summary.reserved_usd = max(summary.reserved_usd, reserved + cost)
                return True
            if not self.in_flight:
                summary.budget_reached = True
                summary.stopped = (
                    f"budget of ${budget:,.2f} reached: ${self.spent:,.4f} spent, "
                    f"${budget - self.spent:,.4f} left, the next request ~${cost:,.4f} at most"
                )
                return False
            self._released.clear()
            await self._released.wait()
        return False

    def _prepare(self, chunk: pl.DataFrame, publisher: Publisher) -> Prepared:
        """Read and claim a chunk's sessions, then have the dispatch render their requests
        (the heuristic's outcomes with them). A separate connection: this runs in a worker
        thread while the loop keeps sending requests and writing outcomes on ``con``."""
        settings = self.settings
        heuristic = self.backend.name == "heuristic"
        with self.claiming, publisher.using(), store_cursor(self.con) as cur:
            if self.fenced:
                raise RunStopped("the run stopped before this chunk was claimed")
            meta, kept = read_sessions(cur, chunk)
            attempts = claim_many(
                cur, chunk, run_id=self.summary.run_id, lease_seconds=settings.lease_seconds
            )
            # the heuristic extracts where it renders, except what may be reused
            reusable = self._reusable_of(chunk["rollout_id"].to_list()) if heuristic else {}
        group = Group(meta, kept, reusable=reusable, chunked=not heuristic, extract=heuristic)
        return self.dispatch.render(group), attempts

    def fence(self) -> None:
        """No chunk claims any more jobs: waits for a claim in progress, so that a stopping
        run hands back everything it holds (a chunk still being prepared in a worker thread
        would otherwise claim its jobs after they were handed back, and keep them)."""
        with self.claiming:
            self.fenced = True

    def _reusable_of(self, ids: list[str]) -> dict[str, frozenset[str]]:
        """The input hashes whose output each of ``ids`` may reuse."""
        if self._reusable_by is None:  # indexed once, by the first chunk that asks
            by_id: dict[str, set[str]] = {}
            for rid, input_hash in self.reusable:
                by_id.setdefault(rid, set()).add(input_hash)
            self._reusable_by = {rid: frozenset(h) for rid, h in by_id.items()}
        return {rid: self._reusable_by[rid] for rid in ids if rid in self._reusable_by}

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
            result = internal_error(request, exc, rules=self.rules)
        finally:
            self.in_flight.pop(request.rollout_id, None)
            slots.release()
        self.spent += result.cost_usd or 0.0
        self._released.set()
        summary.requests += result.requests
        if result.sent and result.reason in RETRY_NOW_REASONS:
            self.streak.append(result.rollout_id)
        elif summary.stopped is None:
            self.streak.clear()
        if len(self.streak) >= self.failure_limit and summary.stopped is None:
            summary.stopped = (
                f"stopped after {len(self.streak)} requests in a row failed with "
                f"{result.reason} (endpoint, key or model unusable; last error: "
                f"{(result.detail or '')[:160]})"
            )
        self.buffer.append(Finished(result, watermark, attempt))
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
                result = await self.dispatch.call(request)
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
        waited = time.monotonic() - self.last_flush
        due = len(self.buffer) >= FLUSH_OUTCOMES or waited > FLUSH_SECONDS
        if not self.buffer or not (force or due):
            return
        batch = self.buffer.copy()
        self.buffer.clear()
        self.last_flush = time.monotonic()
        async with writer:
            await asyncio.to_thread(self._write, batch, publisher)
        self._count(batch)

    def _write(self, batch: list[Finished], publisher: Publisher) -> None:
        # a worker thread: the loop goes on sending meanwhile
        with publisher.using(), store_cursor(self.con) as cur:
            self._record(cur, batch)
        publisher.maybe()

    # -- 4. close ----------------------------------------------------------------------------

    async def close(self) -> None:
        """The backend's connections closed; this run's usage recorded."""
        await self.backend.aclose()
        await asyncio.to_thread(self.dispatch.close)
        self.record_usage()

    def keep_finished(self) -> None:
        """Write the outcomes that arrived but were still buffered when the run stopped (a
        signal, an error), before the run hands its jobs back: an answer received (and paid
        for) is kept, not asked for again. Called once the run's event loop has ended."""
        batch, self.buffer = self.buffer, []
        if not batch:
            return
        with store_cursor(self.con) as cur:
            self._record(cur, batch)
        self._count(batch)
        self.summary.outcomes = dict(self.outcomes)
        self.summary.sessions_failed = self._failed()

    def _release_unsent(self) -> int:
        with store_cursor(self.con) as cur:
            uncharge(cur, self.streak)
            return release_unsent(cur, run_id=self.summary.run_id)

    def record_usage(self) -> None:
        """This run's requests, tokens and cost in ``model_usage`` (a batch's tokens are known
        when the run that applies it records them)."""
        summary, backend = self.summary, self.backend
        if not (summary.requests or summary.input_tokens):
            return
        with store_cursor(self.con) as cur:
            record_usage(
                cur,
                run_id=summary.run_id,
                kind="actual",
                phase="extract",
                backend=backend.name,
                model=backend.model,
                requests=summary.requests,
                input_tokens=summary.input_tokens,
                output_tokens=summary.output_tokens,
                cost_usd=summary.cost_usd if summary.price_known else None,
            )

    # -- outcomes ----------------------------------------------------------------------------

    def _record(
        self,
        cur: duckdb.DuckDBPyConnection,
        done: list[Finished],
        also: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        """Write finished attempts (``finish_many``) as this run's, by this backend, with what
        chunked sessions did (``record_chunks``)."""
        run_id = self.summary.run_id

        def with_chunks(con: duckdb.DuckDBPyConnection) -> None:
            record_chunks(con, done, run_id=run_id)
            if also is not None:
                also(con)

        finish_many(
            cur,
            done,
            run_id=run_id,
            backend=self.backend.name,
            model=self.backend.model,
            prompt_version=STAGE_ONE_PROMPT_VERSION,
            retry_delay=timedelta(hours=self.settings.retry_delay_hours),
            rules=self.rules,
            also=with_chunks,
        )

    def _count(self, done: list[Finished]) -> None:
        """Add finished attempts to the outcome counts and the run's tokens and cost."""
        summary = self.summary
        for f in done:
            r = f.result
            self.outcomes[r.outcome + (f":{r.reason}" if r.reason else "")] += 1
            summary.input_tokens += r.input_tokens
            summary.output_tokens += r.output_tokens
            summary.sessions_chunked += r.chunk_requests > 0
            summary.chunk_requests += r.chunk_requests
            summary.merge_requests += r.merge_requests
            summary.chunks_cut += r.chunks_cut
            if r.cost_usd is None:
                summary.price_known = False
            else:
                self.costs.append(r.cost_usd)
        # summed exactly: the same total whatever the order the answers came in
        summary.cost_usd = math.fsum(self.costs)

    def _failed(self) -> int:
        return sum(n for k, n in self.outcomes.items() if k.startswith(OutcomeKind.FAILED))


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


class RunStopped(Exception):
    """A chunk's preparation began after the run had stopped: nothing was claimed."""


class _Ahead:
    """Chunks of sessions prepared ahead, in order, in worker threads: at most ``depth`` on
    their way (one per worker of the task runner: their rendering runs side by side)."""

    def __init__(
        self,
        chunks: list[pl.DataFrame],
        prepare: Callable[[pl.DataFrame], Prepared],
        *,
        depth: int = 1,
    ):
        self._chunks = chunks
        self._prepare = prepare
        self._depth = max(1, min(depth, MAX_AHEAD))
        self._upcoming: deque[asyncio.Future[Prepared]] = deque()
        self._prepared = 0
        # threads of their own (the loop's default ones write the outcomes meanwhile), daemon
        # ones (an interrupted run does not wait for them), started with the first chunk
        self._threads: DaemonThreads | None = None

    def next(self) -> None:
        """Start preparing the next chunks, up to ``depth`` on their way."""
        while len(self._upcoming) < self._depth and self._prepared < len(self._chunks):
            if self._threads is None:
                self._threads = DaemonThreads(self._depth, name="extract-prepare")
            chunk = self._chunks[self._prepared]
            # the caller's context goes along (a Prefect flow run's, to submit tasks)
            call = partial(contextvars.copy_context().run, self._prepare, chunk)
            self._upcoming.append(asyncio.wrap_future(self._threads.submit(call)))
            self._prepared += 1

    async def take(self) -> Prepared:
        """The next chunk's requests and attempts (its preparation was started)."""
        assert self._upcoming, "next() starts a chunk before take()"
        return await self._upcoming.popleft()

    async def drain(self) -> None:
        """Wait for the chunks still being prepared (their claimed jobs are released
        later)."""
        while self._upcoming:
            await self._upcoming.popleft()

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()


def record_chunks(con: duckdb.DuckDBPyConnection, done: list[Finished], *, run_id: str) -> None:
    """The chunk counts of the attempts of ``done`` that had any, on their
    ``stage1_attempts`` rows (written in the same transaction)."""
    rows = [
        (f.result.rollout_id, f.attempt, f.result.chunk_requests, f.result.merge_requests,
         f.result.chunks_mid_turn, f.result.chunks_cut)
        for f in done
        if f.result.chunk_requests or f.result.chunks_cut
    ]  # fmt: skip
    if not rows:
        return
    frame = pl.DataFrame(
        rows,
        schema={"rollout_id": pl.String, "attempt": pl.Int32, "chunk_requests": pl.Int32,
                "merge_requests": pl.Int32, "chunks_mid_turn": pl.Int32, "chunks_cut": pl.Int32},
        orient="row",
    )  # fmt: skip
    con.register("chunked", frame.to_arrow())
    try:
        con.execute(sql("record_chunks"), {"run_id": run_id})
    finally:
        con.unregister("chunked")
