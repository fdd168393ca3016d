"""The ingest phase alone as a Prefect flow (``memkiln ingest``): the recipe of
``memkiln.pipeline.ingest`` on ``PrefectRunner`` (each ingest batch a ``prepare-batch`` task)."""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import flow

from memkiln.flows.tasks import PrefectRunner
from memkiln.pipeline.ingest import ingest_job
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import IngestSummary


@flow(name="memkiln-ingest", log_prints=False)
def ingest_flow(options: Options) -> IngestSummary:
    """Ingest an archive of rollouts into the DuckDB store."""
    return ingest_job(Settings.from_options(options), PrefectRunner())
