"""The ingest flow: archive directory -> DuckDB tables (files, rollouts, items, quarantine).

1. open the store (create or migrate the schema) and record the run
2. discover rollout files and decide which to read (new or changed fingerprint)
3. load them batch by batch: each batch is read, split, redacted, parsed and normalized
   into Arrow (in a worker thread; under Prefect, as a ``prepare-batch`` task on the flow's
   task runner, Dask workers included), then written by this process, the only writer, in
   order, while the next batches are prepared
4. close the run record with its counts and print the summary

Readers see the store as published at the start, after batches (no more often than every
few seconds) and at the end (``memkiln.io.snapshot``).

The recipe itself is ``memkiln.flows.plain_ingest`` (no Prefect import: what
``--no-prefect`` runs, so that it starts without Prefect); this module wraps it in
Prefect's flow and tasks.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from collections.abc import Generator, Sequence
from typing import Any

import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from memkiln.flows.ephemeral import stoppable
from memkiln.flows.plain_ingest import Preparer as Preparer
from memkiln.flows.plain_ingest import check_archive as check_archive
from memkiln.flows.plain_ingest import ingest_archive
from memkiln.flows.plain_ingest import plan_archive as plan_archive
from memkiln.io.artifacts import phase_of, publish
from memkiln.io.loader import PreparedBatch, frame_to_ipc, prepare_batch_ipc
from memkiln.io.lock import hold_store
from memkiln.io.progress import Reporter
from memkiln.io.runner import current_runner, ordered_results, parallelism, stopped_with
from memkiln.settings import Options, Settings
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.summaries import IngestSummary, ingest_section


@task(
    name="prepare-batch",
    task_run_name="prepare batch {index}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def prepare_task(batch_ipc: bytes, index: int) -> dict[str, object]:
    """Read, split, redact, parse and normalize one batch of files; Arrow IPC out."""
    return prepare_batch_ipc(batch_ipc)


def prepared_by_tasks(
    todo: Sequence[pl.DataFrame], *, rules: RuleSet
) -> Generator[tuple[pl.DataFrame, PreparedBatch], None, None]:
    """Like ``prepared_batches``, with every batch a ``prepare-batch`` task on the flow's
    task runner: as many in flight as the runner has workers, taken in order. Nothing to
    read starts nothing (no local cluster for a night without new files)."""
    if not todo:
        return
    runner = current_runner()
    ahead = parallelism(runner)

    def submit(i: int) -> PrefectFuture[Any]:
        return prepare_task.submit(frame_to_ipc(todo[i]), i)

    with stopped_with(runner):
        for batch, payload in zip(
            todo, ordered_results(submit, range(len(todo)), ahead=ahead), strict=True
        ):
            yield batch, PreparedBatch.from_ipc(payload)
            del payload


@task(
    name="ingest-archive",
    task_run_name="ingest the archive",
    cache_policy=NO_CACHE,
    log_prints=False,
)
def ingest_task(options: Options, parent_run_id: str | None = None) -> IngestSummary:
    """Read new and changed files of the archive into the store."""
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        return ingest_archive(
            settings, reporter=Reporter(enabled=options.progress), prepare=prepared_by_tasks
        )


@flow(name="memkiln-ingest", log_prints=False)
def ingest_flow(options: Options) -> IngestSummary:
    """Ingest an archive of rollouts into the DuckDB store."""
    with hold_store(options.db), stoppable():
        summary = ingest_task(options)
    publish("memkiln ingest", [ingest_section(summary)])
    return summary
