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
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio

import duckdb
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from memkiln.flows.ephemeral import stoppable
from memkiln.io.artifacts import phase_of, publish
from memkiln.io.jobs import store_write_error
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.store import open_store, recorded_run
from memkiln.llm.backends import HEURISTIC_MODEL, Backend, make_backend
from memkiln.llm.engine import Extraction, Plan, policy_from
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import ExtractSummary, extract_section, notes


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
    # 1. open the store and record the run
    con = open_store(settings.db)
    summary = ExtractSummary()
    plan = Plan(policy_from(settings), book, spent_before)
    try:
        with recorded_run(con, command="extract", counts=summary.counters) as summary.run_id:
            engine = Extraction(
                con, settings, backend, rules=rules, summary=summary, reporter=reporter, plan=plan
            )
            asyncio.run(_extract(engine))
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
