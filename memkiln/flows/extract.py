"""Phase 1, stage-one extraction: one job per eligible session, exactly once per version.

1. open the store, record the run, take over jobs left by a run that died
2. select candidates (pure decisions over rollouts and jobs)
3. for each: build the request (kept items, rendered, budgeted), skip it when this exact
   input already has an output, else claim the job and ask the backend, with bounded
   concurrency; each outcome is written as soon as it arrives
4. close the run with its counts; summarize outcomes by reason

Readers see the store as published at the start, after batches of outcomes (no more often than
every few seconds) and at the end (``memkiln.io.snapshot``).
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as datetime_time
from typing import Any

import duckdb
import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from memkiln.constants import FLUSH_OUTCOMES, FLUSH_SECONDS, PREPARE_CHUNK
from memkiln.flows.ephemeral import stoppable
from memkiln.io.artifacts import phase_of, publish
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
    store_write_error,
    uncharge,
)
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.segments import store_segments
from memkiln.io.snapshot import Publisher
from memkiln.io.store import cursor as store_cursor
from memkiln.io.store import fetch_pl, now, open_store, recorded_run, sql
from memkiln.io.usage import past_output_mean, record_estimate, record_usage
from memkiln.llm.backends import HEURISTIC_MODEL, Backend, Request, make_backend
from memkiln.llm.batch import Item as BatchItem
from memkiln.llm.batch import OpenAIBatchBackend, mark_applied, open_owners, poll, submit
from memkiln.settings import Options, Settings
from memkiln.transforms.chunks import Chunk, turn_starts
from memkiln.transforms.estimate import (
    DEFAULT_STAGE_ONE_OUTPUT_TOKENS,
    Estimate,
    expected_output_tokens,
    request_input_tokens,
)
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.prompts import (
    STAGE_ONE_MERGE_VERSION,
    STAGE_ONE_PROMPT_VERSION,
    StageOneInput,
)
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.render import stage_one_chunks, stage_one_inputs
from memkiln.transforms.segments import segment_items
from memkiln.transforms.selection import SelectionPolicy, run_wide_failure_limit, select_candidates
from memkiln.transforms.states import NOT_ELIGIBLE, RETRY_NOW_REASONS
from memkiln.transforms.summaries import ExtractSummary, extract_section, notes


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
    return datetime.combine(day, datetime_time(0), tzinfo=UTC) + timedelta(days=days_after)


def build_requests(
    con: duckdb.DuckDBPyConnection,
    todo: pl.DataFrame,
    *,
    settings: Settings,
    rules: RuleSet,
    chunked: bool = False,
) -> list[Request]:
    """Requests for the sessions of ``todo``: their kept items, rendered, redacted again and
    budgeted into stage-one messages, all sessions of the chunk in one Polars pass.

    With ``chunked`` (a model backend), a session over the budget gets one message per
    chunk of whole turns (``stage_one_chunks``), its input hash made of them all."""
    ids = todo["rollout_id"].to_list()
    meta = fetch_pl(con, sql("request_sessions"), {"ids": ids})
    items = fetch_pl(con, sql("request_items"), {"ids": ids})
    kept = filter_memory_items(items.lazy()).sort("rollout_id", "seq").collect()
    store_segments(con, kept)  # every backend: the sessions' segments, in the store
    del items  # a large session's texts are held once, not twice
    # each session's items as a slice of ``kept`` (sorted by session): no copy
    bounds = kept.group_by("rollout_id", maintain_order=True).agg(n=pl.len())
    offsets = bounds["n"].cum_sum() - bounds["n"]
    per_rollout = {
        (rid,): kept.slice(int(offset), int(n))
        for rid, offset, n in zip(bounds["rollout_id"], offsets, bounds["n"], strict=True)
    }
    empty = kept.clear()
    requests = []
    for row, prompt in stage_one_inputs(
        meta,
        kept.lazy(),
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        rules=rules,
    ):
        rid = row["rollout_id"]
        session = per_rollout.get((rid,), empty)
        digest = hashlib.sha256(prompt.system.encode() + b"\0" + prompt.user.encode())
        chunks: tuple[tuple[Chunk, StageOneInput], ...] = ()
        if chunked and prompt.truncation.truncated:
            chunks = tuple(
                stage_one_chunks(
                    session,
                    rollout_path=row["path"],
                    rollout_cwd=row["cwd"],
                    starts=turn_starts(session),
                    segments=segment_items(session)["first_seq"].to_list(),
                    budget=prompt.truncation.budget,
                    context_window=settings.context_window,
                    max_output_tokens=settings.max_output_tokens,
                    rules=rules,
                )
            )
        if len(chunks) > 1:  # one chunk alone: the single message, cut, is that chunk
            digest = hashlib.sha256(STAGE_ONE_MERGE_VERSION.encode())
            for _, part in chunks:
                digest.update(part.system.encode() + b"\0" + part.user.encode() + b"\0")
        else:
            chunks = ()
        requests.append(
            Request(
                rollout_id=rid,
                items=session,
                facts=RolloutFacts(rollout_id=rid, cwd=row["cwd"], updated_at=row["updated_at"]),
                prompt=prompt,
                input_hash=digest.hexdigest(),
                parts=tuple(part for _, part in chunks),
                chunks=tuple(chunk for chunk, _ in chunks),
                header=(row["path"], row["cwd"]),
            )
        )
    return requests


def request_tokens(request: Request, out_each: int) -> tuple[int, int, int]:
    """``(requests, input tokens, output tokens)`` a request is expected to use: a chunked
    session's chunks and the merge of their answers (``out_each`` tokens each)."""
    if not request.parts:
        return 1, request_input_tokens(request.prompt), out_each
    tokens_in = sum(request_input_tokens(part) for part in request.parts)
    merge_in = request.prompt.system_tokens + out_each * len(request.parts)
    return len(request.parts) + 1, tokens_in + merge_in, out_each * (len(request.parts) + 1)


def extract_store(
    settings: Settings,
    *,
    reporter: Reporter | None = None,
    backend: Backend | None = None,
    spent_before: float = 0.0,
) -> ExtractSummary:
    """Run stage one over the store (no Prefect; the flow below wraps this).

    ``spent_before`` is what earlier phases of the same invocation spent, counted against
    ``budget_usd``.
    """
    reporter = reporter or Reporter(enabled=False)
    rules = load_rules()
    book = PriceBook(settings.prices)
    name = settings.backend
    model = HEURISTIC_MODEL if name == "heuristic" else settings.model
    check_budget_prices(book, backend=name, model=model, budget=settings.budget_usd)
    backend = backend or make_backend(settings, rules=rules)
    con = open_store(settings.db)
    summary = ExtractSummary()
    plan = Plan(policy_from(settings), book, spent_before)
    try:
        with recorded_run(con, command="extract", counts=summary.counters) as summary.run_id:
            asyncio.run(_extract(con, settings, backend, rules, summary, reporter, plan))
    except duckdb.Error as exc:  # the store cannot be written (a full disk, a lost mount)
        raise store_write_error(settings.db, exc) from exc
    finally:
        con.close()
    return summary


@dataclass(frozen=True)
class Plan:
    """How a run selects and what it may spend."""

    policy: SelectionPolicy
    prices: PriceBook
    spent_before: float = 0.0


async def _extract(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    backend: Backend,
    rules: RuleSet,
    summary: ExtractSummary,
    reporter: Reporter,
    plan: Plan,
) -> None:
    # 1. jobs left running by a dead run go back to pending
    summary.orphans_taken_over = release_orphans(con, run_id=summary.run_id)
    batch_backend = backend if isinstance(backend, OpenAIBatchBackend) else None
    if batch_backend is not None and not settings.dry_run:  # answers of earlier batches first
        await asyncio.to_thread(_apply_batches, con, batch_backend, settings, rules, summary)
    # 2. select (the jobs of open batches are held by them)
    rollouts, jobs = load_selection_inputs(con)
    decided = select_candidates(
        rollouts.lazy(),
        jobs.lazy(),
        now=now(),
        policy=plan.policy,
        live_owners=(summary.run_id, *open_owners(con)),
        producer=(backend.name, backend.model, STAGE_ONE_PROMPT_VERSION),
    ).collect()
    summary.considered = decided.height
    summary.decisions = dict(Counter(decided["decision"].to_list()))
    await asyncio.to_thread(_record_decisions, con, decided, summary.run_id)
    todo = decided.filter(pl.col("decision") == "take").select("rollout_id", "updated_at")
    summary.taken = todo.height
    reusable = reusable_outputs(con, prompt_version=STAGE_ONE_PROMPT_VERSION, model=backend.model)
    past = past_output_mean(con, phase="extract", model=backend.model)
    out_each = expected_output_tokens(
        past, default=DEFAULT_STAGE_ONE_OUTPUT_TOKENS, limit=settings.max_output_tokens
    )
    if settings.dry_run:  # count and estimate; no job is claimed, no model called
        estimate = await asyncio.to_thread(
            _estimate, con, decided, todo, settings, backend, rules, reusable, plan, out_each
        )
        with store_cursor(con) as cur:
            record_estimate(cur, run_id=summary.run_id, estimate=estimate)
        summary.estimate = estimate
        await backend.aclose()
        return
    if batch_backend is not None:
        await asyncio.to_thread(
            _submit_batch,
            con,
            batch_backend,
            todo,
            settings,
            rules,
            summary,
            plan,
            reusable,
            out_each,
        )
        await backend.aclose()
        _record_usage(con, summary, backend)
        return
    # the budget: what this invocation spent before this phase, what this run spent, and
    # the estimated cost of each request in flight
    budget = settings.budget_usd
    spent = plan.spent_before
    in_flight: dict[str, float] = {}

    def request_cost(request: Request) -> float:
        _, tokens_in, tokens_out = request_tokens(request, out_each)
        cost = plan.prices.cost(backend.name, backend.model, tokens_in, tokens_out)
        return cost or 0.0

    # 3. extract with bounded concurrency; outcomes are written in small batches
    outcomes: Counter[str] = Counter()
    buffer: list[Finished] = []
    last_flush = time.monotonic()
    slots = asyncio.Semaphore(settings.concurrency)
    # failures of the service (endpoint down, key refused, every request rate-limited, 5xx
    # or timing out) in a row; at the limit the run stops sending and leaves the rest
    # pending, and the sessions of the streak get back the attempts it used
    limit = run_wide_failure_limit(settings.concurrency)
    streak: list[str] = []

    writer = asyncio.Lock()  # one batch of outcomes written at a time, in order
    # readers see the outcomes written so far; the worker threads' store work is kept apart
    # from its copies
    publisher = Publisher(con)

    def write(batch: list[Finished]) -> None:
        # a worker thread: the loop goes on sending meanwhile
        with publisher.using(), store_cursor(con) as cur:
            _record(cur, batch, summary, backend, settings, rules)
        publisher.maybe()

    async def flush(*, force: bool = False) -> None:
        nonlocal last_flush
        due = len(buffer) >= FLUSH_OUTCOMES or time.monotonic() - last_flush > FLUSH_SECONDS
        if not buffer or not (force or due):
            return
        batch = buffer.copy()
        buffer.clear()
        last_flush = time.monotonic()
        async with writer:
            await asyncio.to_thread(write, batch)
        _count(batch, outcomes, summary)

    async def run_one(request: Request, watermark: datetime, attempt: int, done: Any) -> None:
        nonlocal spent
        try:
            result = await backend.extract(request)
        except Exception as exc:  # a backend bug must not stop the batch: record it, go on
            detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=rules)
            result = Outcome(request.rollout_id, "failed", reason="internal_error", detail=detail)
        finally:
            in_flight.pop(request.rollout_id, None)
            slots.release()
        spent += result.cost_usd or 0.0
        summary.requests += result.requests
        if result.sent and result.reason in RETRY_NOW_REASONS:
            streak.append(result.rollout_id)
        elif summary.stopped is None:
            streak.clear()
        if len(streak) >= limit and summary.stopped is None:
            summary.stopped = (
                f"stopped after {len(streak)} requests in a row failed with {result.reason} "
                f"(endpoint, key or model unusable; last error: {(result.detail or '')[:160]})"
            )
        buffer.append(Finished(result, watermark, attempt))
        done(1)
        await flush()

    def prepare(chunk: pl.DataFrame) -> tuple[list[Request], dict[str, int]]:
        # a separate connection: this runs in a worker thread while the loop keeps
        # sending requests and writing outcomes on ``con``
        with publisher.using(), store_cursor(con) as cur:
            requests = build_requests(
                cur, chunk, settings=settings, rules=rules, chunked=backend.name != "heuristic"
            )
            attempts = claim_many(
                cur, chunk, run_id=summary.run_id, lease_seconds=settings.lease_seconds
            )
        return requests, attempts

    running: list[asyncio.Task[None]] = []  # kept until gathered, so an error surfaces
    # the first chunk only fills the slots, so that sending starts as soon as it can
    head = todo.head(settings.concurrency)
    rest = todo.slice(head.height).iter_slices(max(PREPARE_CHUNK, settings.concurrency * 4))
    chunks = [head, *rest] if head.height else []
    upcoming: asyncio.Task[tuple[list[Request], dict[str, int]]] | None = None
    prepared = 0

    def prepare_next() -> None:
        """Start preparing the next chunk in a worker thread, unless one is on its way."""
        nonlocal upcoming, prepared
        if upcoming is None and prepared < len(chunks):
            upcoming = asyncio.create_task(asyncio.to_thread(prepare, chunks[prepared]))
            prepared += 1

    with reporter.task("extract", total=todo.height) as advance:
        prepare_next()
        for chunk in chunks:
            assert upcoming is not None  # prepare_next() set it
            requests, attempts = await upcoming
            upcoming = None
            watermarks = dict(chunk.iter_rows())
            for request in requests:
                rid = request.rollout_id
                if (rid, request.input_hash) in reusable:
                    reused = Outcome(rid, "reused", input_hash=request.input_hash)
                    buffer.append(Finished(reused, watermarks[rid], attempts[rid]))
                    advance(1)
                    continue
                # every slot busy: the next chunk is prepared while these requests wait,
                # not while the first ones of this chunk are being sent
                if slots.locked():
                    prepare_next()
                await slots.acquire()
                if summary.stopped:
                    slots.release()
                    break
                if budget is not None:
                    cost = request_cost(request)
                    reserved = sum(in_flight.values())
                    if spent + reserved + cost > budget:
                        slots.release()
                        summary.budget_reached = True
                        summary.stopped = (
                            f"budget of ${budget:,.2f} reached: ${spent:,.4f} spent so far, "
                            f"${reserved:,.4f} estimated in flight, the next request "
                            f"~${cost:,.4f}"
                        )
                        break
                    in_flight[rid] = cost
                running.append(
                    asyncio.create_task(run_one(request, watermarks[rid], attempts[rid], advance))
                )
            if summary.stopped:
                break
            prepare_next()
            await flush()
        if upcoming is not None:  # claimed while the run stopped: released below
            await upcoming
        if running:
            await asyncio.gather(*running)
    await flush(force=True)
    await backend.aclose()
    if summary.stopped:  # claimed jobs not sent go back to pending, with the unclaimed rest
        await asyncio.to_thread(_release_unsent, con, summary.run_id, streak)
        left = todo.height - sum(outcomes.values())
        summary.stopped += f"; {left:,} sessions left pending for the next run"
    summary.outcomes = dict(outcomes)
    summary.sessions_failed = sum(n for k, n in outcomes.items() if k.startswith("failed"))
    _record_usage(con, summary, backend)


def _record_usage(
    con: duckdb.DuckDBPyConnection, summary: ExtractSummary, backend: Backend
) -> None:
    """This run's requests, tokens and cost in ``model_usage`` (a batch's tokens are known
    when the run that applies it records them)."""
    if not (summary.requests or summary.input_tokens):
        return
    with store_cursor(con) as cur:
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


def _estimate(
    con: duckdb.DuckDBPyConnection,
    decided: pl.DataFrame,
    todo: pl.DataFrame,
    settings: Settings,
    backend: Backend,
    rules: RuleSet,
    reusable: set[tuple[str, str]],
    plan: Plan,
    out_each: int,
) -> Estimate:
    """A dry run: the sessions found, eligible, done and to do, and the requests the real run
    would send, built and counted exactly as it builds them (reused outputs and requests over
    the model's window are not sent)."""
    counts = Counter(decided["decision"].to_list())
    estimate = Estimate(
        sessions_found=decided.height,
        sessions_eligible=decided.height - sum(counts[r] for r in NOT_ELIGIBLE),
        sessions_done=counts["up_to_date"],
        sessions_to_do=todo.height,
    )
    requests = tokens_in = tokens_out = 0
    if backend.name != "heuristic":  # the heuristic backend sends no request
        with store_cursor(con) as cur:
            for chunk in todo.iter_slices(PREPARE_CHUNK * 4):
                built = build_requests(cur, chunk, settings=settings, rules=rules, chunked=True)
                for request in built:
                    if (request.rollout_id, request.input_hash) in reusable:
                        continue
                    window = settings.context_window
                    reserve = settings.max_output_tokens
                    prompts = request.parts or (request.prompt,)
                    if window and any(p.tokens_needed(reserve, window) for p in prompts):
                        continue
                    n, tokens, out = request_tokens(request, out_each)
                    requests += n
                    tokens_in += tokens
                    tokens_out += out
    estimate.add(
        "extract",
        backend.name,
        backend.model,
        requests=requests,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=plan.prices.cost(backend.name, backend.model, tokens_in, tokens_out),
    )
    return estimate


def _apply_batches(
    con: duckdb.DuckDBPyConnection,
    backend: OpenAIBatchBackend,
    settings: Settings,
    rules: RuleSet,
    summary: ExtractSummary,
) -> None:
    """Record the outcomes of the batches that ended since the last run."""
    with store_cursor(con) as cur:
        finished, summary.batches_open = poll(cur, backend)
        # in the same transaction: a batch is applied exactly once, even if the run is
        # killed while its outcomes are written
        _record(cur, finished, summary, backend, settings, rules, also=mark_applied)
    outcomes = Counter(summary.outcomes)
    _count(finished, outcomes, summary)
    summary.outcomes = dict(outcomes)
    summary.sessions_failed = sum(n for k, n in outcomes.items() if k.startswith("failed"))


def _record(
    cur: duckdb.DuckDBPyConnection,
    done: list[Finished],
    summary: ExtractSummary,
    backend: Backend,
    settings: Settings,
    rules: RuleSet,
    also: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> None:
    """Write finished attempts (``finish_many``) as this run's, by this backend, with what
    chunked sessions did (``record_chunks``)."""

    def with_chunks(con: duckdb.DuckDBPyConnection) -> None:
        record_chunks(con, done, run_id=summary.run_id)
        if also is not None:
            also(con)

    finish_many(
        cur,
        done,
        run_id=summary.run_id,
        backend=backend.name,
        model=backend.model,
        prompt_version=STAGE_ONE_PROMPT_VERSION,
        retry_delay=timedelta(hours=settings.retry_delay_hours),
        rules=rules,
        also=with_chunks,
    )


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


def _count(done: list[Finished], outcomes: Counter[str], summary: ExtractSummary) -> None:
    """Add finished attempts to the outcome counts and the run's tokens and cost."""
    for f in done:
        r = f.result
        outcomes[r.outcome + (f":{r.reason}" if r.reason else "")] += 1
        summary.input_tokens += r.input_tokens
        summary.output_tokens += r.output_tokens
        summary.sessions_chunked += r.chunk_requests > 0
        summary.chunk_requests += r.chunk_requests
        summary.merge_requests += r.merge_requests
        summary.chunks_cut += r.chunks_cut
        if r.cost_usd is None:
            summary.price_known = False
        else:
            summary.cost_usd += r.cost_usd


def _submit_batch(
    con: duckdb.DuckDBPyConnection,
    backend: OpenAIBatchBackend,
    todo: pl.DataFrame,
    settings: Settings,
    rules: RuleSet,
    summary: ExtractSummary,
    plan: Plan,
    reusable: set[tuple[str, str]],
    out_each: int,
) -> None:
    """Send this run's sessions as one batch (within the budget); outputs that can be
    reused and requests over the window are recorded at once. A session over the budget
    is extracted in chunks through the ordinary request path now (at the ordinary price),
    not in the batch: its merge request needs the chunks' answers first."""
    items: list[BatchItem] = []
    now_done: list[Finished] = []
    estimate = plan.spent_before + summary.cost_usd
    with store_cursor(con) as cur:
        for chunk in todo.iter_slices(PREPARE_CHUNK * 4):
            if summary.budget_reached:
                break
            requests = build_requests(cur, chunk, settings=settings, rules=rules, chunked=True)
            attempts = claim_many(
                cur, chunk, run_id=summary.run_id, lease_seconds=settings.lease_seconds
            )
            watermarks = dict(chunk.iter_rows())
            for request in requests:
                rid = request.rollout_id
                done = Finished(Outcome(rid, "reused", input_hash=request.input_hash),
                                watermarks[rid], attempts[rid])  # fmt: skip
                window = settings.context_window
                needed = window and request.prompt.tokens_needed(settings.max_output_tokens, window)
                if (rid, request.input_hash) in reusable:
                    now_done.append(done)
                    continue
                if needed:
                    failed = Outcome(rid, "failed", reason="context_overflow",
                                     detail=f"{needed} tokens needed, window {window}",
                                     input_hash=request.input_hash)  # fmt: skip
                    now_done.append(Finished(failed, watermarks[rid], attempts[rid]))
                    continue
                _, tokens_in, tokens_out = request_tokens(request, out_each)
                priced_as = "openai" if request.parts else backend.name  # chunks: not batched
                cost = plan.prices.cost(priced_as, backend.model, tokens_in, tokens_out) or 0.0
                if settings.budget_usd is not None and estimate + cost > settings.budget_usd:
                    summary.budget_reached = True
                    summary.stopped = (
                        f"budget of ${settings.budget_usd:,.2f} reached: the batch holds "
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
        if items:
            submit(cur, backend, items, run_id=summary.run_id)
        _record(cur, now_done, summary, backend, settings, rules)
        release_unsent(cur, run_id=summary.run_id)
    summary.requests += len(items)
    summary.batched = len(items)
    outcomes = Counter(summary.outcomes)
    _count(now_done, outcomes, summary)
    summary.outcomes = dict(outcomes)


def _record_decisions(con: duckdb.DuckDBPyConnection, decided: pl.DataFrame, run_id: str) -> None:
    with store_cursor(con) as cur:
        record_decisions(cur, decided, run_id=run_id)


def _release_unsent(con: duckdb.DuckDBPyConnection, run_id: str, streak: list[str]) -> int:
    with store_cursor(con) as cur:
        uncharge(cur, streak)
        return release_unsent(cur, run_id=run_id)


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
        return extract_store(settings, reporter=reporter, spent_before=spent_before)


@flow(name="memkiln-extract")
def extract_flow(options: Options) -> ExtractSummary:
    """Stage one over the sessions in the store."""
    with hold_store(options.db), stoppable():
        summary = extract_task(options)
    publish("memkiln extract", [extract_section(summary)], notes(extract=summary))
    return summary
