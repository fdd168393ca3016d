"""Ingest: archive directory -> DuckDB tables (files, rollouts, items, quarantine).

1. open the store (create or migrate the schema) and record the run
2. discover rollout files and decide which to read (new or changed fingerprint)
3. load them ingest batch by ingest batch: each is read, split, redacted, parsed and
   normalized into Arrow (in a worker thread; under Prefect, a ``prepare-batch`` task on the
   flow's task runner, Dask workers included: ``Runner.map``), then written by this process,
   the only writer, in order, while the next ones are prepared
4. close the run record with its counts

Readers see the store as published at the start, after ingest batches (no more often than
every few seconds) and at the end (``memkiln.io.snapshot``). Nothing here imports Prefect,
so ``memkiln ingest --no-prefect`` and every command's checks start without it.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import os
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from pathlib import Path

import duckdb
import polars as pl

from memkiln.constants import INGEST_BATCH_FILES, INGEST_DUCKDB_MEMORY, INGEST_DUCKDB_THREADS
from memkiln.errors import ConfigError
from memkiln.io.archive import discover, path_key, shown_path
from memkiln.io.large_file import ingest_large_files
from memkiln.io.loader import (
    BatchResult,
    PreparedBatch,
    frame_to_ipc,
    prepare_batch_ipc,
    prepared_batches,
    write_batch,
)
from memkiln.io.lock import hold_store
from memkiln.io.progress import BYTES, Reporter
from memkiln.io.rules import load_rules
from memkiln.io.run_records import recorded_run
from memkiln.io.snapshot import Publisher
from memkiln.io.store import execute, fetch_pl, open_store, sql
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.settings import Settings
from memkiln.transforms.plan import FOUND_SCHEMA, batches, plan_files
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.summaries import IngestSummary, ingest_section

#: Turns the batches of a run into prepared batches, in order (a worker thread by default).
Preparer = Callable[..., Generator[tuple[pl.DataFrame, PreparedBatch], None, None]]


def check_archive(archive: Path) -> Path:
    if not archive.exists():
        raise ConfigError(f"archive directory {archive} does not exist")
    if not archive.is_dir():
        raise ConfigError(f"archive {archive} is not a directory")
    return archive


def plan_archive(con: duckdb.DuckDBPyConnection, archive: Path) -> pl.DataFrame:
    """Discover files under ``archive`` and mark each new, changed or unchanged."""
    stats = list(discover(archive))
    # files are recognised by the key of their real path (the stored path is redacted): the
    # plan is made over keys, then the paths are put back, as text any frame holds (a name
    # that is not UTF-8 shows its bytes as \xNN) and as the real bytes the file is read by
    found = pl.DataFrame(
        [(path_key(s.path), s.size, s.mtime_ns) for s in stats], schema=FOUND_SCHEMA, orient="row"
    )
    known = fetch_pl(con, sql("known_files"))
    plan = plan_files(found, known)
    real = pl.DataFrame(
        {
            "key": found["path"],
            "real": [shown_path(s.path) for s in stats],
            "raw_path": [os.fsencode(s.path) for s in stats],
        },
        schema={"key": pl.String, "real": pl.String, "raw_path": pl.Binary},
    )
    return (
        plan.join(real, left_on="path", right_on="key", how="left", maintain_order="left")
        .with_columns(path="real")
        .drop("real")
    )


def writer_settings(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB's settings for the store's connection while it writes ingest batches."""
    # a large batch's rows wait in the transaction: past this, DuckDB writes them out
    execute(con, "set_memory_limit", limit=INGEST_DUCKDB_MEMORY)
    execute(con, "set_threads", threads=INGEST_DUCKDB_THREADS)


def ingest_archive(
    settings: Settings,
    *,
    reporter: Reporter | None = None,
    prepare: Preparer = prepared_batches,
) -> IngestSummary:
    """Run an ingest (the phase; tests call it directly).

    ``prepare`` prepares the ingest batches (a worker thread; a runner that spreads passes
    its tasks, ``prepared_on``)."""
    archive = check_archive(Path(settings.archive or ""))
    reporter = reporter or Reporter(enabled=False)
    reporter.waiting(f"ingest: looking for new and changed files in {archive}")
    con = open_store(settings.db)
    summary = IngestSummary()
    try:
        writer_settings(con)
        shown = redact_text(str(archive.resolve()), rules=load_rules())
        with recorded_run(
            con, command="ingest", archive=shown, counts=summary.counters
        ) as summary.run_id:
            _ingest(con, archive, settings, summary, reporter, prepare)
    finally:
        con.close()
    return summary


def _ingest(
    con: duckdb.DuckDBPyConnection,
    archive: Path,
    settings: Settings,
    summary: IngestSummary,
    reporter: Reporter,
    prepare: Preparer,
) -> None:
    # 2. discover and plan
    plan = plan_archive(con, archive)
    actions = Counter(plan["action"].to_list())
    summary.files_seen = plan.height
    summary.files_new = actions.get("new", 0)
    summary.files_changed = actions.get("changed", 0)
    summary.files_skipped = actions.get("unchanged", 0)
    todo = batches(plan, max_bytes=settings.batch_bytes, max_files=INGEST_BATCH_FILES)
    rules = load_rules()
    statuses: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    # 3. load batch by batch
    total = int(sum(b["size"].sum() for b in todo))
    publisher = Publisher(con)  # readers see the batches written so far
    # closing(): an error while writing stops the worker before the error propagates
    with (
        reporter.task("ingest", total=total, unit=BYTES) as advance,
        closing(prepare(todo, rules=rules)) as stream,
    ):
        for batch, prepared in stream:
            result: BatchResult = write_batch(con, prepared, run_id=summary.run_id)
            if prepared.large.height:  # files read in pieces, each piece written as it is read
                prepared.norm.clear()  # the batch's rows are written: let them go first
                result.add(
                    ingest_large_files(con, prepared.large, run_id=summary.run_id, rules=rules)
                )
            summary.bytes_read += result.bytes_read
            summary.rollouts += result.rollouts
            summary.items += result.items
            summary.quarantined += result.quarantined
            summary.set_aside.extend(result.set_aside)
            summary.files_failed += result.failed_files
            statuses.update(result.statuses)
            hits.update(result.hits)
            publisher.maybe()
            advance(int(batch["size"].sum()))
    summary.statuses = dict(statuses)
    summary.hits = dict(hits)


def prepare_step(batch_ipc: bytes, index: int) -> dict[str, object]:
    """Read, split, redact, parse and normalize one ingest batch of files; Arrow IPC in and
    out (the step a runner maps: it may run in another process)."""
    return prepare_batch_ipc(batch_ipc)


def prepared_on(runner: Runner) -> Preparer:
    """``prepared_batches`` with every ingest batch ``prepare_step`` on ``runner`` (as many in
    flight as it has workers, taken in order); ``prepared_batches`` itself on a runner that
    does not spread. Nothing to read starts nothing (no local cluster for a night without
    new files)."""
    if not runner.spreads:
        return prepared_batches

    def prepared(
        todo: Sequence[pl.DataFrame], *, rules: RuleSet
    ) -> Generator[tuple[pl.DataFrame, PreparedBatch], None, None]:
        if not todo:
            return
        items = ((frame_to_ipc(batch), i) for i, batch in enumerate(todo))
        for batch, payload in zip(todo, runner.map(prepare_step, items), strict=True):
            yield batch, PreparedBatch.from_ipc(payload)
            del payload

    return prepared


def ingest(settings: Settings, *, runner: Runner, reporter: Reporter) -> IngestSummary:
    """The ingest phase on ``runner``."""
    return ingest_archive(settings, reporter=reporter, prepare=prepared_on(runner))


def ingest_job(settings: Settings, runner: Runner | None = None) -> IngestSummary:
    """``memkiln ingest``: the phase alone, the store held."""
    runner = runner or LocalRunner()
    with hold_store(settings.db), runner.guarded():
        summary = runner.phase(
            ingest, settings, parent_run_id=None, reporter=Reporter(enabled=settings.progress)
        )
    runner.report("memkiln ingest", [ingest_section(summary)], [])
    return summary
