"""Phase 1, stage-one extraction: one job per eligible session, exactly once per version.

1. open the store, record the run, take over jobs left by a run that died
2. select candidates (pure decisions over rollouts and jobs)
3. for each: build the request (kept items, rendered, budgeted), skip it when this exact
   input already has an output, else claim the job and ask the backend, with bounded
   concurrency; each outcome is written as soon as it arrives
4. close the run with its counts; summarize outcomes by reason
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

import duckdb
import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from memkiln.flows.progress import Reporter
from memkiln.io.backends import Backend, Request, make_backend
from memkiln.io.jobs import (
    Outcome,
    claim,
    finish,
    load_selection_inputs,
    release_orphans,
    reusable_output,
)
from memkiln.io.preview import stage_one_input
from memkiln.io.store import fetch_pl, finish_run, now, open_store, start_run
from memkiln.settings import Settings
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.prompts import STAGE_ONE_PROMPT_VERSION
from memkiln.transforms.redact import RuleSet, load_rules, redact_text
from memkiln.transforms.selection import SelectionPolicy, select_candidates


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


def build_request(
    con: duckdb.DuckDBPyConnection,
    rollout_id: str,
    *,
    settings: Settings,
    rules: RuleSet,
) -> Request:
    """A session's kept items and its rendered, budgeted stage-one messages."""
    meta = con.execute(
        "select path, cwd, updated_at from rollouts where rollout_id = $rid", {"rid": rollout_id}
    ).fetchall()[0]
    items = fetch_pl(
        con,
        "select * exclude (payload_json) from items where rollout_id = $rid order by seq",
        {"rid": rollout_id},
    )
    prompt = stage_one_input(
        items,
        rollout_path=meta[0],
        rollout_cwd=meta[1],
        context_window=settings.context_window,
        rules=rules,
    )
    digest = hashlib.sha256()
    digest.update(prompt.system.encode())
    digest.update(b"\0")
    digest.update(prompt.user.encode())
    kept = filter_memory_items(items.lazy()).collect()
    return Request(
        rollout_id=rollout_id,
        items=kept,
        facts=RolloutFacts(rollout_id=rollout_id, cwd=meta[1], updated_at=meta[2]),
        prompt=prompt,
        input_hash=digest.hexdigest(),
    )


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
        summary.run_id = start_run(con, command="extract")
        try:
            asyncio.run(_extract(con, settings, backend, rules, summary, reporter))
        except BaseException as exc:
            finish_run(
                con, summary.run_id, status="failed", counts={},
                error=redact_text(f"{type(exc).__name__}: {exc}"[:500], rules=rules),
            )  # fmt: skip
            raise
        finish_run(con, summary.run_id, status="succeeded", counts={})
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
    ).collect()
    summary.considered = decided.height
    summary.decisions = dict(Counter(decided["decision"].to_list()))
    todo = decided.filter(pl.col("decision") == "take").select("rollout_id", "updated_at")
    # 3. extract with bounded concurrency; outcomes written as they arrive
    outcomes: Counter[str] = Counter()
    retry_delay = timedelta(hours=settings.retry_delay_hours)
    slots = asyncio.Semaphore(settings.concurrency)

    def record(result: Outcome, watermark: object, attempt: int) -> None:
        finish(
            con,
            result,
            watermark=watermark,  # type: ignore[arg-type]
            attempt=attempt,
            run_id=summary.run_id,
            backend=backend.name,
            model=backend.model,
            prompt_version=STAGE_ONE_PROMPT_VERSION,
            retry_delay=retry_delay,
        )
        key = result.outcome + (f":{result.reason}" if result.reason else "")
        outcomes[key] += 1
        summary.input_tokens += result.input_tokens
        summary.output_tokens += result.output_tokens
        summary.cost_usd += result.cost_usd

    async def run_one(request: Request, watermark: object, attempt: int, done: object) -> None:
        try:
            result = await backend.extract(request)
        except Exception as exc:  # a backend bug must not stop the batch: record it, go on
            detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=rules)
            result = Outcome(request.rollout_id, "failed", reason="internal_error", detail=detail)
        finally:
            slots.release()
        record(result, watermark, attempt)
        done(1)  # type: ignore[operator]

    with reporter.task("extract", total=todo.height) as advance:
        running: set[asyncio.Task[None]] = set()
        for rollout_id, watermark in todo.iter_rows():
            await slots.acquire()
            request = build_request(con, rollout_id, settings=settings, rules=rules)
            if reusable_output(
                con,
                rollout_id,
                input_hash=request.input_hash,
                prompt_version=STAGE_ONE_PROMPT_VERSION,
                model=backend.model,
            ):
                slots.release()
                attempt = claim(
                    con, rollout_id, watermark=watermark, run_id=summary.run_id,
                    lease_seconds=settings.lease_seconds,
                )  # fmt: skip
                record(
                    Outcome(rollout_id, "reused", input_hash=request.input_hash), watermark, attempt
                )
                advance(1)
                continue
            attempt = claim(
                con, rollout_id, watermark=watermark, run_id=summary.run_id,
                lease_seconds=settings.lease_seconds,
            )  # fmt: skip
            if backend.name != "heuristic":
                summary.requests += 1
            job = asyncio.create_task(run_one(request, watermark, attempt, advance))
            running.add(job)
            job.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    await backend.aclose()
    summary.outcomes = dict(outcomes)


@task(name="extract", cache_policy=NO_CACHE)
def extract_task(settings: Settings, show_progress: bool) -> ExtractSummary:
    return extract_store(settings, reporter=Reporter(enabled=show_progress))


@flow(name="memkiln-extract", validate_parameters=False)
def extract_flow(settings: Settings, show_progress: bool = True) -> ExtractSummary:
    """Stage one over the sessions in the store."""
    return extract_task(settings, show_progress)
