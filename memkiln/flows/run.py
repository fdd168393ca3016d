"""The whole job, the flow a scheduler runs each night (``memkiln run``, ``memkiln serve``).

1. hold the store (one run per database at a time) and record the run
2. ingest (new and changed files only)
3. extract (eligible sessions whose stored output is not up to date)
4. consolidate (projects whose memories changed)
5. close the run record with every phase's counters; publish the summary
"""

# No ``from __future__ import annotations`` in the flow modules: a served or deployed flow
# run starts in a spawned process that gets the flow function cloudpickled by value, with
# only the globals its body uses, so a parameter annotated with the string "Options" could
# not be resolved there to validate the parameters.
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prefect import flow

from memkiln.errors import ConfigError
from memkiln.flows.consolidate import ConsolidateSummary, consolidate_store, consolidate_task
from memkiln.flows.ephemeral import stoppable
from memkiln.flows.extract import ExtractSummary, extract_store, extract_task
from memkiln.flows.ingest import IngestSummary, check_archive, ingest_archive, ingest_task
from memkiln.flows.progress import Reporter
from memkiln.flows.records import (
    consolidate_section,
    extract_section,
    flow_run_id,
    ingest_section,
    notes,
    publish,
)
from memkiln.io.lock import hold_store
from memkiln.io.store import linked_runs, recorded_parent_run
from memkiln.settings import Options, Settings


@dataclass
class RunSummary:
    run_id: str = ""
    ingest: IngestSummary = field(default_factory=IngestSummary)
    extract: ExtractSummary = field(default_factory=ExtractSummary)
    consolidate: ConsolidateSummary = field(default_factory=ConsolidateSummary)

    def counters(self) -> dict[str, float]:
        """Every phase's counters (they name different columns of ``runs``)."""
        return self.ingest.counters() | self.extract.counters() | self.consolidate.counters()


def _run_name() -> str:
    return datetime.now(UTC).strftime("run-%Y-%m-%dT%H-%M-%SZ")


@flow(name="memkiln-run", flow_run_name=_run_name)
def run_flow(options: Options) -> RunSummary:
    """Ingest the archive, extract stage-one memories, consolidate per-project memory files."""
    # 1. hold the store and record the run
    if options.archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    archive = str(check_archive(options.archive).resolve())
    summary = RunSummary()
    with (
        hold_store(options.db),
        stoppable(),
        linked_runs(flow_run_id=flow_run_id()),
        recorded_parent_run(
            options.db, command="run", archive=archive, counts=summary.counters
        ) as summary.run_id,
    ):
        # 2.-4. the phases, each recorded as a run whose parent is this one
        summary.ingest = ingest_task(options, summary.run_id)
        summary.extract = extract_task(options, summary.run_id)
        summary.consolidate = consolidate_task(options, None, summary.run_id)
    # 5. publish
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    attention = notes(extract=summary.extract, consolidate=summary.consolidate)
    publish("memkiln run", sections, attention)
    return summary


def run_job(settings: Settings) -> RunSummary:
    """The same recipe in this process alone, without Prefect (``--no-prefect``)."""
    if settings.archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    archive = str(check_archive(settings.archive).resolve())
    reporter = Reporter(enabled=settings.progress)
    summary = RunSummary()
    with (
        hold_store(settings.db),
        stoppable(),
        recorded_parent_run(
            settings.db, command="run", archive=archive, counts=summary.counters
        ) as summary.run_id,
        linked_runs(parent_run_id=summary.run_id),
    ):
        summary.ingest = ingest_archive(settings, reporter=reporter)
        summary.extract = extract_store(settings, reporter=reporter)
        summary.consolidate = consolidate_store(settings, reporter=reporter)
    return summary
