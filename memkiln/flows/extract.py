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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from memkiln.constants import FLUSH_OUTCOMES, FLUSH_SECONDS, PREPARE_CHUNK
from memkiln.flows.ephemeral import stoppable
from memkiln.flows.progress import Reporter
from memkiln.flows.records import extract_section, notes, phase_of, publish
from memkiln.io.backends import Backend, Request, make_backend
from memkiln.io.jobs import (
    RETRY_NOW_REASONS,
    Finished,
    Outcome,
    claim_many,
    finish_many,
    load_selection_inputs,
    release_orphans,
    release_unsent,
    reusable_outputs,
    store_write_error,
    uncharge,
)
from memkiln.io.lock import hold_store
from memkiln.io.snapshot import Publisher
from memkiln.io.store import cursor as store_cursor
from memkiln.io.store import fetch_pl, now, open_store, recorded_run
from memkiln.settings import Options, Settings
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.prompts import STAGE_ONE_PROMPT_VERSION, build_stage_one_input
from memkiln.transforms.redact import RuleSet, load_rules, redact_expr, redact_text
from memkiln.transforms.render import contents_by_rollout
from memkiln.transforms.selection import (
    SelectionPolicy,
    run_wide_failure_limit,
    select_candidates,
)


@dataclass
class ExtractSummary:
    """What one extraction run did."""

    run_id: str = ""
    considered: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # "failed:rate_limited" etc.
    orphans_taken_over: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    stopped: str | None = None  # why the run stopped before sending every session
    #: sessions whose attempt in this run failed (every reason); the CLI exits 1 when > 0
    sessions_failed: int = 0

    def counters(self) -> dict[str, float]:
        """The ``runs`` table's counters of this run."""
        failed = sum(n for key, n in self.outcomes.items() if key.startswith("failed"))
        return {
            "sessions_considered": self.considered,
            "sessions_succeeded": self.outcomes.get("succeeded", 0),
            "sessions_no_output": self.outcomes.get("succeeded_no_output", 0),
            "sessions_failed": failed,
            "sessions_reused": self.outcomes.get("reused", 0),
            "model_requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
        }


def policy_from(settings: Settings) -> SelectionPolicy:
    return SelectionPolicy(
        sources=tuple(settings.sources),
        max_rollout_age_days=settings.max_rollout_age_days,
        min_rollout_idle_hours=settings.min_rollout_idle_hours,
        max_rollouts_per_run=settings.max_rollouts_per_run,
        scan_limit=settings.scan_limit,
        retry_budget=settings.retry_budget,
        backfill=settings.backfill,
    )


def build_requests(
    con: duckdb.DuckDBPyConnection,
    todo: pl.DataFrame,
    *,
    settings: Settings,
    rules: RuleSet,
) -> list[Request]:
    """Requests for the sessions of ``todo``: their kept items, rendered, redacted again and
    budgeted into stage-one messages, all sessions of the chunk in one Polars pass."""
    ids = todo["rollout_id"].to_list()
    meta = fetch_pl(
        con,
        "select rollout_id, path, cwd, updated_at from rollouts where rollout_id = any($ids)",
        {"ids": ids},
    ).with_columns(
        path=redact_expr(pl.col("path"), rules=rules), cwd=redact_expr(pl.col("cwd"), rules=rules)
    )
    items = fetch_pl(
        con,
        "select * exclude (payload_json) from items where rollout_id = any($ids)",
        {"ids": ids},
    )
    kept = filter_memory_items(items.lazy()).sort("rollout_id", "seq").collect()
    del items  # a large session's texts are held once, not twice
    contents = contents_by_rollout(kept.lazy(), rules=rules).collect()
    # each session's items as a slice of ``kept`` (sorted by session): no copy
    bounds = kept.group_by("rollout_id", maintain_order=True).agg(n=pl.len())
    offsets = bounds["n"].cum_sum() - bounds["n"]
    per_rollout = {
        (rid,): kept.slice(int(offset), int(n))
        for rid, offset, n in zip(bounds["rollout_id"], offsets, bounds["n"], strict=True)
    }
    empty = kept.clear()
    table = meta.join(contents, on="rollout_id", how="left")
    requests = []
    for rid, path, cwd, updated_at, body in table.select(
        "rollout_id", "path", "cwd", "updated_at", "contents"
    ).iter_rows():
        prompt = build_stage_one_input(
            rollout_path=path,
            rollout_cwd=cwd,
            rollout_contents=body or "",
            context_window=settings.context_window,
            max_output_tokens=settings.max_output_tokens,
        )
        digest = hashlib.sha256(prompt.system.encode() + b"\0" + prompt.user.encode())
        requests.append(
            Request(
                rollout_id=rid,
                items=per_rollout.get((rid,), empty),
                facts=RolloutFacts(rollout_id=rid, cwd=cwd, updated_at=updated_at),
                prompt=prompt,
                input_hash=digest.hexdigest(),
            )
        )
    return requests


def extract_store(
    settings: Settings,
    *,
    reporter: Reporter | None = None,
    backend: Backend | None = None,
) -> ExtractSummary:
    """Run stage one over the store (no Prefect; the flow below wraps this)."""
    reporter = reporter or Reporter(enabled=False)
    rules = load_rules()
    backend = backend or make_backend(settings, rules=rules)
    con = open_store(settings.db)
    summary = ExtractSummary()
    try:
        with recorded_run(con, command="extract", counts=summary.counters) as summary.run_id:
            asyncio.run(_extract(con, settings, backend, rules, summary, reporter))
    except duckdb.Error as exc:  # the store cannot be written (a full disk, a lost mount)
        raise store_write_error(settings.db, exc) from exc
    finally:
        con.close()
    return summary


async def _extract(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    backend: Backend,
    rules: RuleSet,
    summary: ExtractSummary,
    reporter: Reporter,
) -> None:
    # 1. jobs left running by a dead run go back to pending
    summary.orphans_taken_over = release_orphans(con, run_id=summary.run_id)
    # 2. select
    rollouts, jobs = load_selection_inputs(con)
    decided = select_candidates(
        rollouts.lazy(),
        jobs.lazy(),
        now=now(),
        policy=policy_from(settings),
        live_owners=(summary.run_id,),
        producer=(backend.name, backend.model, STAGE_ONE_PROMPT_VERSION),
    ).collect()
    summary.considered = decided.height
    summary.decisions = dict(Counter(decided["decision"].to_list()))
    todo = decided.filter(pl.col("decision") == "take").select("rollout_id", "updated_at")
    reusable = reusable_outputs(con, prompt_version=STAGE_ONE_PROMPT_VERSION, model=backend.model)
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
            finish_many(
                cur,
                batch,
                run_id=summary.run_id,
                backend=backend.name,
                model=backend.model,
                prompt_version=STAGE_ONE_PROMPT_VERSION,
                retry_delay=timedelta(hours=settings.retry_delay_hours),
                rules=rules,
            )
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
        for f in batch:
            r = f.result
            outcomes[r.outcome + (f":{r.reason}" if r.reason else "")] += 1
            summary.input_tokens += r.input_tokens
            summary.output_tokens += r.output_tokens
            summary.cost_usd += r.cost_usd

    async def run_one(request: Request, watermark: datetime, attempt: int, done: Any) -> None:
        try:
            result = await backend.extract(request)
        except Exception as exc:  # a backend bug must not stop the batch: record it, go on
            detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=rules)
            result = Outcome(request.rollout_id, "failed", reason="internal_error", detail=detail)
        finally:
            slots.release()
        summary.requests += result.sent
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
            requests = build_requests(cur, chunk, settings=settings, rules=rules)
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
            requests, attempts = await upcoming  # type: ignore[misc]
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


def _release_unsent(con: duckdb.DuckDBPyConnection, run_id: str, streak: list[str]) -> int:
    with store_cursor(con) as cur:
        uncharge(cur, streak)
        return release_unsent(cur, run_id=run_id)


@task(
    name="extract-sessions",
    task_run_name="extract with {options.backend}",
    cache_policy=NO_CACHE,
)
def extract_task(options: Options, parent_run_id: str | None = None) -> ExtractSummary:
    """Stage one over the eligible sessions whose output is not up to date."""
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        return extract_store(settings, reporter=Reporter(enabled=options.progress))


@flow(name="memkiln-extract")
def extract_flow(options: Options) -> ExtractSummary:
    """Stage one over the sessions in the store."""
    with hold_store(options.db), stoppable():
        summary = extract_task(options)
    publish("memkiln extract", [extract_section(summary)], notes(extract=summary))
    return summary
