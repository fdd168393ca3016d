"""The stage-one extraction engine: one run's state and the steps the extract recipe calls in
order (``memkiln.pipeline.extract``): take over what a dead run left, select, then estimate (a
dry run), submit a Batch API job (openai-batch) or send the requests with bounded
concurrency (the send loop: ``memkiln.pipeline.extract_send``), and close.

The store, the claims, the budget, the pace, the reused outputs and the failures in a row
stay with this process; rendering and model calls go where the run's dispatch puts them (in
this process, or as Prefect tasks on the flow's task runner, ``memkiln.llm.units``).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as datetime_time

import duckdb
import polars as pl

from memkiln.constants import PREPARE_GROUP
from memkiln.io.jobs import (
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
from memkiln.io.session_items import item_sizes, window_chars
from memkiln.io.snapshot import Publisher
from memkiln.io.store import cursor as store_cursor
from memkiln.io.store import now, sql
from memkiln.io.usage import past_output, record_estimate, record_usage
from memkiln.llm.backends import Backend, Request
from memkiln.llm.batch import OpenAIBatchBackend
from memkiln.llm.requests import build_requests, read_sessions, request_tokens
from memkiln.llm.units import Dispatch, Group, Local
from memkiln.pipeline.batch_jobs import Item as BatchItem
from memkiln.pipeline.batch_jobs import mark_applied, open_owners, poll, submit
from memkiln.pipeline.extract_send import Prepared, Sender
from memkiln.settings import Settings
from memkiln.transforms.estimate import (
    DEFAULT_STAGE_ONE_OUTPUT_TOKENS,
    Estimate,
    OutputBasis,
    expected_output_tokens,
)
from memkiln.transforms.prompts import STAGE_ONE_PROMPT_VERSION, window_shortfall
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.selection import SelectionPolicy, select_candidates
from memkiln.transforms.sending import Budget
from memkiln.transforms.states import (
    NOT_ELIGIBLE,
    Decision,
    FailureReason,
    Finished,
    Outcome,
    OutcomeKind,
)
from memkiln.transforms.summaries import ExtractSummary


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
        summary.budget_usd = settings.budget_usd
        summary.spent_before_usd = plan.spent_before
        #: finished attempts not written yet (the send loop's, ``keep_finished`` on a stop)
        self.buffer: list[Finished] = []
        # the cost of every finished attempt (their total is the run's cost)
        self.costs: list[float] = []
        # groups prepared side by side read and claim in the store one at a time; once the
        # run stops, none claims any more (``fence``)
        self.claiming = threading.Lock()
        self.fenced = False

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
            self.record(cur, finished, also=mark_applied)
        self.count(finished)
        self.summary.outcomes = dict(self.outcomes)
        self.summary.sessions_failed = self.failed()

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
                for group in todo.iter_slices(PREPARE_GROUP * 4):
                    built = build_requests(
                        cur, group, settings=settings, rules=self.rules, chunked=True
                    )
                    for request in built:
                        if (request.rollout_id, request.input_hash) in self.reusable:
                            continue
                        if window_shortfall(
                            request.parts or (request.prompt,),
                            reserve=settings.max_output_tokens,
                            window=settings.context_window,
                        ):
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
            for group in todo.iter_slices(PREPARE_GROUP * 4):
                if summary.budget_reached:
                    break
                requests = build_requests(
                    cur, group, settings=settings, rules=self.rules, chunked=True
                )
                attempts = claim_many(
                    cur, group, run_id=summary.run_id, lease_seconds=settings.lease_seconds
                )
                watermarks = dict(group.iter_rows())
                for request in requests:
                    rid = request.rollout_id
                    reused = Outcome(rid, OutcomeKind.REUSED, input_hash=request.input_hash)
                    done = Finished(reused, watermarks[rid], attempts[rid])
                    over = window_shortfall(
                        (request.prompt,),
                        reserve=settings.max_output_tokens,
                        window=settings.context_window,
                    )
                    if (rid, request.input_hash) in self.reusable:
                        now_done.append(done)
                        continue
                    if over:
                        failed = Outcome(
                            rid,
                            OutcomeKind.FAILED,
                            reason=FailureReason.CONTEXT_OVERFLOW,
                            detail=over,
                            input_hash=request.input_hash,
                        )
                        now_done.append(Finished(failed, watermarks[rid], attempts[rid]))
                        continue
                    # the worst case: every output token the request may ask for
                    _, tokens_in, tokens_out = request_tokens(request, self.most_out())
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
            self.record(cur, now_done)
            release_unsent(cur, run_id=summary.run_id)
        summary.requests += len(items)
        summary.batched = len(items)
        self.count(now_done)
        summary.outcomes = dict(self.outcomes)
        summary.sessions_failed = self.failed()

    # -- 3c. requests, with bounded concurrency ----------------------------------------------

    async def send(self, todo: pl.DataFrame) -> None:
        """Ask the backend for every session of ``todo`` (``memkiln.pipeline.extract_send``)."""
        budget = Budget(self.settings.budget_usd, spent=self.plan.spent_before)
        await Sender(self, budget).send(todo)

    def most_out(self) -> int:
        """The output tokens a request may ask for at most."""
        return max(self.settings.max_output_tokens, self.out_each)

    def worst_cost(self, request: Request) -> float:
        """What ``request`` may cost at most: its input and every output token it may ask
        for (0 when the model's price is unknown)."""
        _, tokens_in, tokens_out = request_tokens(request, self.most_out())
        backend = self.backend
        cost = self.plan.prices.cost(backend.name, backend.model, tokens_in, tokens_out)
        return cost or 0.0

    def prepare(self, group: pl.DataFrame, publisher: Publisher) -> Prepared:
        """Read and claim a group's sessions, then have the dispatch render their requests
        (the heuristic's outcomes with them). A separate connection: this runs in a worker
        thread while the loop keeps sending requests and writing outcomes on ``con``."""
        settings = self.settings
        heuristic = self.backend.name == "heuristic"
        with self.claiming, publisher.using(), store_cursor(self.con) as cur:
            if self.fenced:
                raise RunStopped("the run stopped before this group was claimed")
            meta, kept = read_sessions(cur, group, context_window=settings.context_window)
            attempts = claim_many(
                cur, group, run_id=self.summary.run_id, lease_seconds=settings.lease_seconds
            )
            # the heuristic extracts where it renders, except what may be reused
            reusable = self._reusable_of(group["rollout_id"].to_list()) if heuristic else {}
        work = Group(meta, kept, reusable=reusable, chunked=not heuristic, extract=heuristic)
        return self.dispatch.render(work), attempts

    def held_sizes(self, ids: list[str]) -> dict[str, int]:
        """Characters of kept items each session of ``ids`` holds once read (a session past
        four windows: two windows; ``io.session_items``)."""
        window = window_chars(self.settings.context_window)
        with self.claiming, store_cursor(self.con) as cur:
            sizes = item_sizes(cur, ids)
        return {rid: 2 * window if n > 4 * window else n for rid, n in sizes.items()}

    def fence(self) -> None:
        """No group claims any more jobs: waits for a claim in progress, so that a stopping
        run hands back everything it holds (a group still being prepared in a worker thread
        would otherwise claim its jobs after they were handed back, and keep them)."""
        with self.claiming:
            self.fenced = True

    def _reusable_of(self, ids: list[str]) -> dict[str, frozenset[str]]:
        """The input hashes whose output each of ``ids`` may reuse."""
        if self._reusable_by is None:  # indexed once, by the first group that asks
            by_id: dict[str, set[str]] = {}
            for rid, input_hash in self.reusable:
                by_id.setdefault(rid, set()).add(input_hash)
            self._reusable_by = {rid: frozenset(h) for rid, h in by_id.items()}
        return {rid: self._reusable_by[rid] for rid in ids if rid in self._reusable_by}

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
            self.record(cur, batch)
        self.count(batch)
        self.summary.outcomes = dict(self.outcomes)
        self.summary.sessions_failed = self.failed()

    def release_unsent(self, streak: list[str]) -> int:
        """Claimed jobs not sent go back to pending; the sessions of a streak of the
        service's failures get back the attempts it used."""
        with store_cursor(self.con) as cur:
            uncharge(cur, streak)
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

    def record(
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

    def count(self, done: list[Finished]) -> None:
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

    def failed(self) -> int:
        return sum(n for k, n in self.outcomes.items() if k.startswith(OutcomeKind.FAILED))


class RunStopped(Exception):
    """A group's preparation began after the run had stopped: nothing was claimed."""


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
