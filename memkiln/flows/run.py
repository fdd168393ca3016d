"""The whole job, the flow a scheduler runs each night (``memkiln run``, ``memkiln serve``).

1. hold the store (one run per database at a time) and record the run
2. ingest (new and changed files only)
3. extract (eligible sessions whose stored output is not up to date)
4. consolidate (projects whose memories changed)
5. with the ``publish`` setting: place the memory where the agents named load it
6. close the run record with every phase's counters; publish the summary

The same recipe without Prefect (``run_job``, what ``--no-prefect`` runs) and the summary
both return are in ``memkiln.flows.plain_run``, which imports no Prefect, so that
``--no-prefect`` starts without it.
"""

# No ``from __future__ import annotations`` in the flow modules: a served or deployed flow
# run starts in a spawned process that gets the flow function cloudpickled by value, with
# only the globals its body uses, so a parameter annotated with the string "Options" could
# not be resolved there to validate the parameters.
from datetime import UTC, datetime

from prefect import flow

from memkiln.flows.consolidate import consolidate_task
from memkiln.flows.extract import extract_task
from memkiln.flows.ingest import ingest_task
from memkiln.flows.plain_run import SUMMED as SUMMED
from memkiln.flows.plain_run import RunSummary, dry_run_estimate, spent, whole_job
from memkiln.flows.plain_run import merge_counters as merge_counters
from memkiln.flows.plain_run import run_job as run_job
from memkiln.flows.publish import publish_task
from memkiln.flows.run_logs import log_phase, quiet_completed_tasks, quiet_keepalive_tracebacks
from memkiln.io.artifacts import flow_run_id, publish
from memkiln.settings import Options, Settings
from memkiln.transforms.publish import publish_section
from memkiln.transforms.summaries import (
    consolidate_section,
    extract_section,
    ingest_section,
    notes,
)


def _run_name() -> str:
    return datetime.now(UTC).strftime("run-%Y-%m-%dT%H-%M-%SZ")


@flow(name="memkiln-run", flow_run_name=_run_name)
def run_flow(options: Options) -> RunSummary:
    """Ingest the archive, extract stage-one memories, consolidate per-project memory files."""
    quiet_completed_tasks()  # the phases' counts are logged instead
    quiet_keepalive_tracebacks()
    # 1. hold the store and record the run
    summary = RunSummary()
    with whole_job(
        options.db,
        options.archive,
        command="run",
        counts=summary.counters,
        flow_run_id=flow_run_id(),
    ) as summary.run_id:
        # 2.-4. the phases, each recorded as a run whose parent is this one
        summary.ingest = ingest_task(options, summary.run_id)
        log_phase(ingest_section(summary.ingest))
        summary.extract = extract_task(options, summary.run_id)
        log_phase(extract_section(summary.extract))
        if options.dry_run:  # no phase 2 files; its requests are estimated instead
            settings = Settings.from_options(options)
            summary.estimate = dry_run_estimate(settings, summary.extract, run_id=summary.run_id)
        else:
            used = spent(summary.extract)
            summary.consolidate = consolidate_task(options, None, summary.run_id, used)
            log_phase(consolidate_section(summary.consolidate))
            # 5. the agents' read paths
            if options.publish:
                summary.publish = publish_task(options, summary.run_id)
    # 6. publish the summary
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    attention = notes(extract=summary.extract, consolidate=summary.consolidate)
    if summary.publish is not None:
        sections.append(publish_section(summary.publish))
        attention = [*attention, *summary.publish.lines]
    publish("memkiln run", sections, attention)
    return summary
