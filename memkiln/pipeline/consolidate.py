"""Phase 2, consolidation: per project, memory files an agent can load.

1. open the store and the output root (temporaries of a killed run are removed)
2. select each project's memories (usage from citations, then recency; at most 256)
3. per project whose inputs changed since its last success: write raw_memories.md and
   rollout_summaries/, then MEMORY.md and memory_summary.md (heuristic or model, with
   skills from a model), removing files of memories that left the selection; on a runner
   that spreads (Prefect), the heuristic backend's files of each project are rendered by a
   ``render-project`` task on the flow's task runner (Dask workers included), and this
   process writes them
4. clear the folders of projects left without memories; write INDEX.md
5. record the model's usage; the run closes with its counts

The steps are the methods of ``memkiln.pipeline.consolidate_steps.Consolidation``. Nothing here
imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
from collections.abc import Iterator

import duckdb
import polars as pl

from memkiln.io.jobs import store_write_error
from memkiln.io.loader import frame_from_ipc, frame_to_ipc
from memkiln.io.lock import hold_store
from memkiln.io.memory_files import OutputRoot
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.run_records import recorded_run
from memkiln.io.store import open_store
from memkiln.llm.backends import OpenAIBackend
from memkiln.pipeline.consolidate_steps import Consolidation, Renderer
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.settings import Settings
from memkiln.transforms.consolidate import heuristic_files
from memkiln.transforms.summaries import ConsolidateSummary, consolidate_section, notes


def consolidate_store(
    settings: Settings,
    *,
    project: str | None = None,
    reporter: Reporter | None = None,
    spent_before: float = 0.0,
    render: Renderer | None = None,
) -> ConsolidateSummary:
    """Run phase 2 over the store (the phase; tests call it directly). ``spent_before``
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


def render_step(project_key: str, selected_ipc: bytes) -> dict[str, str]:
    """A project's memory files under the heuristic backend (pure work, the step a runner
    maps: it may run in another process; the files are written by the phase's process)."""
    return heuristic_files(project_key, frame_from_ipc(selected_ipc))


def rendered_on(runner: Runner) -> Renderer | None:
    """Each project's files from ``render_step`` on ``runner``, in order (``None`` on a
    runner that does not spread: the phase renders each project itself)."""
    if not runner.spreads:
        return None

    def rendered(
        projects: list[tuple[str, pl.DataFrame]],
    ) -> Iterator[tuple[str, dict[str, str]]]:
        items = ((key, frame_to_ipc(frame)) for key, frame in projects)
        for (key, _), files in zip(projects, runner.map(render_step, items), strict=True):
            yield key, files

    return rendered


def consolidate(
    settings: Settings,
    *,
    runner: Runner,
    reporter: Reporter,
    project: str | None = None,
    spent_before: float = 0.0,
) -> ConsolidateSummary:
    """The consolidation phase on ``runner``."""
    return consolidate_store(
        settings,
        project=project,
        reporter=reporter,
        spent_before=spent_before,
        render=rendered_on(runner),
    )


def consolidate_job(
    settings: Settings, runner: Runner | None = None, project: str | None = None
) -> ConsolidateSummary:
    """``memkiln consolidate``: the phase alone, the store held."""
    runner = runner or LocalRunner()
    with hold_store(settings.db), runner.guarded():
        summary = runner.phase(
            consolidate,
            settings,
            parent_run_id=None,
            reporter=Reporter(enabled=settings.progress),
            project=project,
        )
    runner.report("memkiln consolidate", [consolidate_section(summary)], notes(consolidate=summary))
    return summary
