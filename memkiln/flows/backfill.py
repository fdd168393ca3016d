"""A backfill over years of history (``memkiln backfill``).

1. hold the store and record the run (command ``backfill``)
2. ingest the archive (new and changed files only)
3. extract every eligible session whose own dates fall in ``since``..``until`` (the nightly
   age window does not apply), in batches of ``max_rollouts_per_run``, each a run of its own,
   until none is left, the budget is reached or a batch stops early; with ``--wait``
   (openai-batch), until every batch of the Batch API has ended and been applied
4. consolidate (projects whose memories changed); a dry run estimates it instead
5. close the run record with the counters of every phase and batch

Interrupted anywhere, the next invocation goes on: finished sessions are up to date, jobs
of the killed run are taken over, and a batch takes only sessions not yet done.

The same recipe without Prefect (``backfill_job``, what ``--no-prefect`` runs) and the summary
both return are in ``memkiln.flows.plain_backfill``, which imports no Prefect, so that
``--no-prefect`` starts without it.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import flow

from memkiln.flows.consolidate import consolidate_task
from memkiln.flows.extract import extract_task
from memkiln.flows.ingest import ingest_task
from memkiln.flows.plain_backfill import ALL_SESSIONS as ALL_SESSIONS
from memkiln.flows.plain_backfill import (
    BackfillSummary,
    backfill_settings,
    more_to_do,
    wait_then_again,
)
from memkiln.flows.plain_backfill import backfill_job as backfill_job
from memkiln.flows.plain_run import dry_run_estimate, whole_job
from memkiln.io.artifacts import flow_run_id, publish
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import (
    consolidate_section,
    extract_section,
    ingest_section,
    notes,
)


@flow(name="memkiln-backfill")
def backfill_flow(options: Options) -> BackfillSummary:
    """Ingest the archive, extract every eligible session of the date range in batches,
    consolidate per-project memory files."""
    # 1. hold the store and record the run
    options = backfill_settings(options)
    summary = BackfillSummary()
    with whole_job(
        options.db,
        options.archive,
        command="backfill",
        counts=summary.counters,
        flow_run_id=flow_run_id(),
    ) as summary.run_id:
        # 2. ingest
        summary.ingest = ingest_task(options, summary.run_id)
        # 3. extract in batches
        spent = 0.0
        while True:
            batch = extract_task(options, summary.run_id, spent)
            summary.batches.append(batch)
            spent += batch.cost_usd
            if not more_to_do(batch) and not wait_then_again(options, batch):
                break
        # 4. consolidate, or estimate it
        if options.dry_run:
            settings = Settings.from_options(options)
            summary.estimate = dry_run_estimate(settings, batch, run_id=summary.run_id)
        else:
            summary.consolidate = consolidate_task(options, None, summary.run_id, spent)
    # 5. publish
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    publish(
        "memkiln backfill",
        sections,
        notes(extract=summary.extract, consolidate=summary.consolidate),
    )
    return summary
