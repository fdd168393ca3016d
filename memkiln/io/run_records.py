"""A run's record around its work: ``running`` when it starts, then ``succeeded`` with its
counters, ``interrupted`` or ``failed`` with the (redacted) error; the store published for
readers (``memkiln.io.snapshot``) as the record opens and closes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

from memkiln.errors import StoreError
from memkiln.io.rules import load_rules
from memkiln.io.signals import stop_request
from memkiln.io.snapshot import publish
from memkiln.io.store import Counters, finish_run, now, open_store, sql, start_run
from memkiln.transforms.redact import redact_text


@contextmanager
def recorded_run(
    con: duckdb.DuckDBPyConnection,
    *,
    command: str,
    archive: str | None = None,
    counts: Callable[[], Counters] = dict,
) -> Iterator[str]:
    """Record a run around a block: ``running`` on entry, then ``succeeded`` with its counts;
    ``interrupted`` (SIGTERM, SIGINT) or ``failed`` with the (redacted) error, which is raised
    again. A run that stops early hands back the stage-one jobs it still holds."""
    run_id = start_run(con, command=command, archive=archive)
    _publish(con)
    try:
        yield run_id
    except BaseException as exc:
        _close_stopped_run(con, run_id, exc, counts())
        _publish(con, after=exc)
        raise
    finish_run(con, run_id, status="succeeded", counts=counts())
    _publish(con)


@contextmanager
def recorded_parent_run(
    db: Path,
    *,
    command: str,
    archive: str | None = None,
    counts: Callable[[], Counters] = dict,
) -> Iterator[str]:
    """Like ``recorded_run`` for a run made of phases that open the store themselves (the
    store is opened only to start and to close the record)."""
    con = open_store(db)
    try:
        run_id = start_run(con, command=command, archive=archive)
        _publish(con)
    finally:
        con.close()
    try:
        yield run_id
    except BaseException as exc:
        # the phase's own error is what happened: a store that cannot be opened again to
        # close the record (a phase that left it open) must not take its place
        with suppress(StoreError):
            con = open_store(db)
            try:
                _close_stopped_run(con, run_id, exc, counts())
                _publish(con, after=exc)
            finally:
                con.close()
        raise
    con = open_store(db)
    try:
        finish_run(con, run_id, status="succeeded", counts=counts())
        _publish(con)
    finally:
        con.close()


def _publish(con: duckdb.DuckDBPyConnection, *, after: BaseException | None = None) -> None:
    """Publish the store for readers (``memkiln.io.snapshot``) as a run record opens or
    closes. After an error, a failure to publish must not hide the error: it is dropped
    (readers keep the previous copy)."""
    if after is None:
        publish(con)
        return
    try:
        publish(con)
    except (StoreError, duckdb.Error):
        return


def _close_stopped_run(
    con: duckdb.DuckDBPyConnection, run_id: str, exc: BaseException, counts: Counters
) -> None:
    signal_name = stop_request(exc)
    if signal_name is not None:
        status, error = "interrupted", f"interrupted by {signal_name}"
    else:
        status = "failed"
        error = redact_text(f"{type(exc).__name__}: {exc}"[:500], rules=load_rules())
    con.execute(sql("release_run_leases"), {"run_id": run_id, "at": now()})
    finish_run(con, run_id, status=status, counts=counts, error=error)
