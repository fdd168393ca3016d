"""A backfill over years of history as a Prefect flow (``memkiln backfill``): the recipe of
``memkiln.pipeline.backfill`` on ``PrefectRunner``, each phase and round a task."""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import flow

from memkiln.flows.tasks import PrefectRunner
from memkiln.pipeline.backfill import BackfillSummary, backfill_job
from memkiln.settings import Options, Settings


@flow(name="memkiln-backfill")
def backfill_flow(options: Options) -> BackfillSummary:
    """Ingest the archive, extract every eligible session of the date range in rounds,
    consolidate per-project memory files."""
    return backfill_job(Settings.from_options(options), PrefectRunner())
