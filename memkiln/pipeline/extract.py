"""Phase 1, stage-one extraction: one job per eligible session, exactly once per version.

1. open the store, record the run, take over jobs left by a run that died (and record the
   answers of Batch API jobs that ended, with openai-batch)
2. select candidates (pure decisions over rollouts and jobs)
3. a dry run estimates; openai-batch submits one Batch API job; otherwise, for each session:
   build the request (kept items, rendered, budgeted), skip it when this exact input already
   has an output, else claim the job and ask the backend, with bounded concurrency; each
   outcome is written as soon as it arrives
4. close the backend, record the usage; the run closes with its counts

The steps are the methods of ``memkiln.pipeline.extract_steps.Extraction``. Readers see the store as
published at the start, after a few outcomes (no more often than every few seconds) and at
the end (``memkiln.io.snapshot``). The work of step 3 that needs no store goes where the
runner's ``dispatch`` puts it (under Prefect: ``render-sessions`` and ``call-model`` tasks,
``memkiln.flows.dispatch``); this process reads, claims, decides what is sent and writes
every outcome as it arrives. Nothing here imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
from contextlib import suppress

import duckdb

from memkiln.constants import HEURISTIC_MODEL
from memkiln.io.jobs import store_write_error
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.run_records import recorded_run
from memkiln.io.store import open_store
from memkiln.llm.backends import Backend
from memkiln.llm.choice import make_backend
from memkiln.llm.units import Dispatch
from memkiln.pipeline.extract_steps import Extraction, Plan, policy_from
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.pipeline.waiting import until_applied
from memkiln.settings import Settings
from memkiln.transforms.summaries import ExtractSummary, extract_section, notes


def extract_store(
    settings: Settings,
    *,
    reporter: Reporter | None = None,
    backend: Backend | None = None,
    spent_before: float = 0.0,
    dispatch: Dispatch | None = None,
) -> ExtractSummary:
    """Run stage one over the store (the phase; tests and benchmarks call it directly).

    ``spent_before`` is what earlier phases of the same invocation spent, counted against
    ``budget_usd``; ``dispatch`` runs the rendering and the model calls elsewhere (tasks),
    else here.
    """
    reporter = reporter or Reporter(enabled=False)
    reporter.waiting("extract: choosing the sessions to extract")
    rules = load_rules()
    book = PriceBook(settings.prices)
    name = settings.backend
    model = HEURISTIC_MODEL if name == "heuristic" else settings.model
    check_budget_prices(book, backend=name, model=model, budget=settings.budget_usd)
    backend = backend or make_backend(settings, rules=rules)
    summary = ExtractSummary()
    plan = Plan(policy_from(settings), book, spent_before)
    # 1. open the store and record the run (nothing that may fail between: it is closed below)
    con = open_store(settings.db)
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


def extract(
    settings: Settings, *, runner: Runner, reporter: Reporter, spent_before: float = 0.0
) -> ExtractSummary:
    """The extraction phase on ``runner``."""
    return extract_store(
        settings,
        reporter=reporter,
        spent_before=spent_before,
        dispatch=runner.dispatch(settings),
    )


def extract_job(settings: Settings, runner: Runner | None = None) -> ExtractSummary:
    """``memkiln extract``: the phase alone, the store held."""
    runner = runner or LocalRunner()
    with hold_store(settings.db), runner.guarded():
        reporter = Reporter(enabled=settings.progress)
        summary = until_applied(
            lambda spent: runner.phase(
                extract, settings, parent_run_id=None, reporter=reporter, spent_before=spent
            ),
            settings,
        )
    runner.report("memkiln extract", [extract_section(summary)], notes(extract=summary))
    return summary
