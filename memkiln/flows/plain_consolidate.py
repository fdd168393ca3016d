"""Consolidation in this process alone, without Prefect (``--no-prefect``, tests,
benchmarks): the recipe of ``memkiln.flows.consolidate``, whose flow and tasks wrap it
(passing a ``render`` that renders the projects' files as tasks). Nothing here imports
Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio

import duckdb

from memkiln.io.jobs import store_write_error
from memkiln.io.memory_files import OutputRoot
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.store import open_store, recorded_run
from memkiln.llm.backends import OpenAIBackend
from memkiln.llm.consolidation import Consolidation, Renderer
from memkiln.settings import Settings
from memkiln.transforms.summaries import ConsolidateSummary


def consolidate_store(
    settings: Settings,
    *,
    project: str | None = None,
    reporter: Reporter | None = None,
    spent_before: float = 0.0,
    render: Renderer | None = None,
) -> ConsolidateSummary:
    """Run phase 2 over the store (no Prefect; ``consolidate_flow`` wraps this). ``spent_before``
    is what earlier phases of the same invocation spent, counted against ``budget_usd``;
    ``render`` renders the heuristic files of projects elsewhere (tasks), else here."""
    reporter = reporter or Reporter(enabled=False)
    reporter.waiting("consolidate: choosing the projects whose memories changed")
    rules = load_rules()
    root = OutputRoot(settings.out)
    synchronous = settings.backend in ("openai", "openai-batch")  # phase 2 is synchronous
    if synchronous:
        check_budget_prices(
            PriceBook(settings.prices),
            backend="openai",
            model=settings.model,
            budget=settings.budget_usd,
        )
    backend = OpenAIBackend(settings, rules=rules) if synchronous else None
    # 1. open the store and record the run
    con = open_store(settings.db)
    summary = ConsolidateSummary()
    try:
        with recorded_run(con, command="consolidate", counts=summary.counters) as summary.run_id:
            work = Consolidation(
                con,
                root,
                settings,
                backend,
                rules=rules,
                summary=summary,
                reporter=reporter,
                spent_before=spent_before,
            )
            asyncio.run(_consolidate(work, project, render))
    except duckdb.Error as exc:  # the store cannot be written (a full disk, a lost mount)
        raise store_write_error(settings.db, exc) from exc
    finally:
        con.close()
    return summary


async def _consolidate(work: Consolidation, only: str | None, render: Renderer | None) -> None:
    # 1. leftovers of a killed run
    work.root.clean_temporaries()
    # 2. select
    keys = work.select(only)
    if only is not None and not keys:  # nothing to do, and the index stays as it is
        if work.backend is not None:
            await work.backend.aclose()
        return
    # 3. per project (the heuristic files of the projects that changed rendered ahead)
    await work.projects(keys, render=render)
    # 4. projects left without memories (a run over every project), then the index
    if only is None:
        work.remove_stale(keys)
    work.write_index()
    # 5. the model's usage; the backend closed
    await work.close()
