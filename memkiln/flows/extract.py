"""Phase 1 alone as a Prefect flow (``memkiln extract``): the recipe of
``memkiln.pipeline.extract`` on ``PrefectRunner`` (rendering and model calls as tasks,
``memkiln.flows.dispatch``)."""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import flow

from memkiln.flows.tasks import PrefectRunner
from memkiln.pipeline.extract import extract_job
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import ExtractSummary


@flow(name="memkiln-extract")
def extract_flow(options: Options) -> ExtractSummary:
    """Stage one over the sessions in the store."""
    return extract_job(Settings.from_options(options), PrefectRunner())
