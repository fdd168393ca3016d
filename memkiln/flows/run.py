"""The whole job: ingest the archive, then extract stage-one memories.

1. ingest (new and changed files only)
2. extract (eligible sessions whose stored output is not up to date)
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow

from memkiln.flows.consolidate import ConsolidateSummary, consolidate_task
from memkiln.flows.extract import ExtractSummary, extract_task
from memkiln.flows.ingest import IngestSummary, ingest_task
from memkiln.settings import Settings


@dataclass
class RunSummary:
    ingest: IngestSummary
    extract: ExtractSummary
    consolidate: ConsolidateSummary


@flow(name="memkiln-run", validate_parameters=False)
def run_flow(settings: Settings, show_progress: bool = True) -> RunSummary:
    """Ingest, extract, consolidate."""
    ingested = ingest_task(settings, show_progress)
    extracted = extract_task(settings, show_progress)
    consolidated = consolidate_task(settings, None, show_progress)
    return RunSummary(ingest=ingested, extract=extracted, consolidate=consolidated)
