"""Phase 2 alone as a Prefect flow (``memkiln consolidate``): the recipe of
``memkiln.pipeline.consolidate`` on ``PrefectRunner`` (each project's heuristic files a
``render-project`` task)."""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import flow

from memkiln.flows.tasks import PrefectRunner
from memkiln.pipeline.consolidate import consolidate_job
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import ConsolidateSummary


@flow(name="memkiln-consolidate")
def consolidate_flow(options: Options, project: str | None = None) -> ConsolidateSummary:
    """Phase 2: per-project memory files."""
    return consolidate_job(Settings.from_options(options), PrefectRunner(), project)
