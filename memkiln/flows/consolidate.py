"""Phase 2, consolidation: per project, memory files an agent can load.

1. open the store and the output root (temporaries of a killed run are removed)
2. select each project's memories (usage from citations, then recency; at most 256)
3. per project whose inputs changed since its last success: write raw_memories.md and
   rollout_summaries/, then MEMORY.md and memory_summary.md (heuristic or model, with
   skills from a model), removing files of memories that left the selection; under Prefect
   the heuristic backend's files of each project are rendered by a ``render-project`` task
   on the flow's task runner (Dask workers included), and this process writes them
4. clear the folders of projects left without memories; write INDEX.md
5. record the model's usage; the run closes with its counts

The steps are the methods of ``memkiln.llm.consolidation.Consolidation``.

The recipe itself is ``memkiln.flows.plain_consolidate`` (no Prefect import: what
``--no-prefect`` runs, so that it starts without Prefect); this module wraps it in
Prefect's flow and tasks.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from collections.abc import Iterator
from typing import Any

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from memkiln.flows.ephemeral import stoppable
from memkiln.flows.plain_consolidate import consolidate_store
from memkiln.io.artifacts import phase_of, publish
from memkiln.io.loader import frame_from_ipc, frame_to_ipc
from memkiln.io.lock import hold_store
from memkiln.io.progress import Reporter
from memkiln.io.runner import current_runner, ordered_results, parallelism, stopped_with
from memkiln.settings import Options, Settings
from memkiln.transforms.consolidate import heuristic_files
from memkiln.transforms.summaries import ConsolidateSummary, consolidate_section, notes


@task(
    name="render-project",
    task_run_name="render {project_key}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def render_task(project_key: str, selected_ipc: bytes) -> dict[str, str]:
    """A project's memory files under the heuristic backend (pure work; written by the
    flow's process)."""
    return heuristic_files(project_key, frame_from_ipc(selected_ipc))


def rendered_by_tasks(
    projects: list[tuple[str, pl.DataFrame]],
) -> Iterator[tuple[str, dict[str, str]]]:
    """Each project's files from a ``render-project`` task on the flow's task runner, in
    order, as many in flight as the runner has workers."""
    runner = current_runner()
    ahead = parallelism(runner) if projects else 1

    def submit(item: tuple[str, pl.DataFrame]) -> PrefectFuture[Any]:
        key, frame = item
        return render_task.submit(key, frame_to_ipc(frame))

    with stopped_with(runner if projects else None):
        results = ordered_results(submit, projects, ahead=ahead)
        for (key, _), files in zip(projects, results, strict=True):
            yield key, files


@task(
    name="consolidate-projects",
    task_run_name="consolidate the projects",
    cache_policy=NO_CACHE,
)
def consolidate_task(
    options: Options,
    project: str | None = None,
    parent_run_id: str | None = None,
    spent_before: float = 0.0,
) -> ConsolidateSummary:
    """Write the memory files of every project whose memories changed."""
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        reporter = Reporter(enabled=options.progress)
        return consolidate_store(
            settings,
            project=project,
            reporter=reporter,
            spent_before=spent_before,
            render=rendered_by_tasks,
        )


@flow(name="memkiln-consolidate")
def consolidate_flow(options: Options, project: str | None = None) -> ConsolidateSummary:
    """Phase 2: per-project memory files."""
    with hold_store(options.db), stoppable():
        summary = consolidate_task(options, project)
    publish("memkiln consolidate", [consolidate_section(summary)], notes(consolidate=summary))
    return summary
