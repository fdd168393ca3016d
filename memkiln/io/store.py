"""The DuckDB store: opening (with migrations), named SQL, and run records.

One process at a time can hold a DuckDB file; memkiln's flow process is that single writer.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from memkiln.constants import READERS_STORAGE_VERSION, ROW_GROUP_SIZE, SCHEMA_VERSION
from memkiln.errors import StoreError, StoreLockedError

if TYPE_CHECKING:  # imported where used: 'memkiln status' reads the store without Polars
    import polars as pl

#: The name the store's file is attached under (``use``d by every connection).
STORE_CATALOG = "store"

_SCHEMA_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

#: A run's counters by ``runs`` column; None where a figure is unknown (a cost without a price).
Counters = Mapping[str, float | None]

#: Counter columns of the ``runs`` table a run may set (an allow-list for identifiers).
RUN_COUNTERS = (
    "files_seen",
    "files_new",
    "files_changed",
    "files_skipped",
    "files_failed",
    "bytes_read",
    "rollouts",
    "items",
    "quarantined",
    "secrets_redacted",
    "sessions_considered",
    "sessions_succeeded",
    "sessions_no_output",
    "sessions_failed",
    "sessions_reused",
    "model_requests",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "projects",
    "projects_written",
    "projects_skipped",
    "projects_failed",
    "files_written",
    "files_removed",
    "memory_lines_dropped",
)

#: What a new run record is linked to: the ``memkiln run`` it is a phase of
#: (``parent_run_id``) and the Prefect flow run it runs in (``flow_run_id``). Set by the flows
#: around a phase, read by ``start_run``.
_RUN_LINKS: ContextVar[tuple[str | None, str | None]] = ContextVar(
    "memkiln_run_links", default=(None, None)
)
#: The runs this process recorded (``start_run``): a stop before the first one changed nothing.
_STARTED: list[str] = []


def runs_started() -> int:
    """How many run records this process has opened."""
    return len(_STARTED)


def _sql_dir(kind: str) -> resources.abc.Traversable:
    return resources.files("memkiln") / "sql" / kind


@cache
def sql(name: str) -> str:
    """The text of ``sql/queries/<name>.sql``."""
    return (_sql_dir("queries") / f"{name}.sql").read_text(encoding="utf-8")


def execute(
    con: duckdb.DuckDBPyConnection, query: str, /, **params: Any
) -> duckdb.DuckDBPyConnection:
    """Execute ``sql/queries/<query>.sql`` with exactly the named parameters given."""
    return con.execute(sql(query), params)


@cache
def schema_files() -> list[tuple[int, str, str]]:
    """``(version, name, text)`` of every schema file, in order."""
    out = []
    for entry in _sql_dir("schema").iterdir():
        m = _SCHEMA_FILE.match(entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(out)


def open_store(path: Path | str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the DuckDB file and bring its schema up to date."""
    target = Path(path)
    if str(path) != ":memory:":
        if target.exists() and target.is_dir():
            raise StoreError(f"database path {target} is a directory; give a file path")
        parent = target.parent
        if not read_only:
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create the database directory {parent}: {exc.strerror}"
                ) from exc
    try:
        con = connect_file(path, read_only=read_only)
    except duckdb.IOException as exc:
        message = str(exc)
        if "lock" in message.lower():
            raise StoreLockedError(
                f"{target} is in use by another process (DuckDB allows one at a time); "
                "wait for it to finish or work on a copy of the file"
            ) from exc
        raise StoreError(f"cannot open database {target}: {message.splitlines()[0]}") from exc
    except duckdb.Error as exc:
        raise StoreError(f"cannot open database {target}: {str(exc).splitlines()[0]}") from exc
    if not read_only:
        try:
            migrate(con)
        except duckdb.Error as exc:  # a full disk, a file system gone read-only
            con.close()
            first = " ".join(str(exc).split())[:300]
            raise StoreError(
                f"cannot write database {target} ({first}); free disk space or check the "
                "file system, then run again"
            ) from exc
    return con


def connect_file(path: Path | str, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """The store's connection. The file is attached with small row groups: a large ingest
    appends a few thousand rows of long texts per batch, and with DuckDB's default row group
    (122,880 rows) every checkpoint rewrote the growing last row group, so time and memory
    grew with the archive.

    A new file is written in the storage format of ``READERS_STORAGE_VERSION`` (DuckDB 1.4
    and newer open it), so the readers' copy can stay a byte copy; an existing file keeps
    its format (DuckDB cannot lower it)."""
    if str(path) == ":memory:":
        return duckdb.connect(":memory:")
    # DuckDB's allocator gives back the pages it freed in a thread of its own (its threads
    # only do so after a task otherwise): reading a 60 MiB session's items left ~130 MB with
    # the store until the next read; eight such sessions under Prefect with a model peaked
    # 0.05 GB lower (bench/RESULTS.md, "Many large sessions at once, round four")
    con = duckdb.connect(":memory:", config={"allocator_background_threads": True})
    literal = "'" + str(path).replace("'", "''") + "'"
    options = f"row_group_size {ROW_GROUP_SIZE}" + (", read_only" if read_only else "")
    if not read_only and not Path(path).exists():
        options += f", storage_version '{READERS_STORAGE_VERSION}'"
    try:
        con.execute(f"attach {literal} as {STORE_CATALOG} ({options})")
        con.execute(f"use {STORE_CATALOG}")
    except BaseException:
        con.close()
        raise
    return con


#: The name a copy of the store is attached under while ``copy_store`` writes it.
_COPY_CATALOG = "store_copy"


def copy_store(con: duckdb.DuckDBPyConnection, dest: Path, *, storage_version: str) -> None:
    """Write everything of the store (tables, comments, views) into the new file ``dest``, in
    DuckDB's storage format ``storage_version`` (a version such as ``v1.4.0``)."""
    literal = "'" + str(dest).replace("'", "''") + "'"
    version = "'" + storage_version.replace("'", "''") + "'"
    con.execute(f"attach {literal} as {_COPY_CATALOG} (storage_version {version})")
    try:
        con.execute(f"copy from database {STORE_CATALOG} to {_COPY_CATALOG}")
    finally:
        con.execute(f"detach {_COPY_CATALOG}")


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Another connection to the same store (for a worker thread)."""
    cur = con.cursor()
    if any(row[0] == STORE_CATALOG for row in cur.execute("show databases").fetchall()):
        cur.execute(f"use {STORE_CATALOG}")
    return cur


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, **frames: pl.DataFrame) -> Iterator[None]:
    """One transaction around a block, with ``frames`` registered as relations of those
    names for its statements: committed when the block ends, rolled back if it raises."""
    with registered(con, **{name: frame.to_arrow() for name, frame in frames.items()}):
        con.execute("begin transaction")
        try:
            yield
        except BaseException:
            con.execute("rollback")
            raise
        con.execute("commit")


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, **tables: Any) -> Iterator[None]:
    """``tables`` (Arrow tables or anything DuckDB registers) as relations of those names for
    the block's statements, unregistered when it ends, whatever happens."""
    done: list[str] = []
    try:
        for name, table in tables.items():
            con.register(name, table)
            done.append(name)
        yield
    finally:
        for name in done:
            con.unregister(name)


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply the schema files this database has not seen; recreate the views. Returns the
    schema version."""
    con.execute((_sql_dir("schema") / "0001_schema_migrations.sql").read_text("utf-8"))
    applied = {row[0] for row in execute(con, "migrations_applied").fetchall()}
    known = schema_files()
    if applied - {version for version, _, _ in known}:
        raise StoreError("this database was written by a newer memkiln; upgrade memkiln")
    migrated = False
    for version, name, text in known:
        if version in applied:
            continue
        migrated = True
        with transaction(con):
            con.execute(text)
            execute(con, "migration_applied", version=version, name=name)
    views = view_files()
    digest = hashlib.sha256(b"".join(f"{n}\0{t}\0".encode() for n, t in views)).hexdigest()
    names = [name.removesuffix(".sql") for name, _ in views]  # a file creates its namesake
    if migrated or execute(con, "views_digest", names=names).fetchall() != [(digest,)]:
        with transaction(con):
            for _, text in views:
                con.execute(text)
            execute(con, "views_created", digest=digest)
    return SCHEMA_VERSION


@cache
def view_files() -> list[tuple[str, str]]:
    """``(name, text)`` of every view file, in name order (views may use earlier ones)."""
    entries = sorted(_sql_dir("views").iterdir(), key=lambda e: e.name)
    return [(e.name, e.read_text(encoding="utf-8")) for e in entries if e.name.endswith(".sql")]


def now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def linked_runs(
    *, parent_run_id: str | None = None, flow_run_id: str | None = None
) -> Iterator[None]:
    """Runs recorded inside the block carry these links (see ``_RUN_LINKS``)."""
    token = _RUN_LINKS.set((parent_run_id, flow_run_id))
    try:
        yield
    finally:
        _RUN_LINKS.reset(token)


def start_run(con: duckdb.DuckDBPyConnection, *, command: str, archive: str | None = None) -> str:
    """Record a new run as ``running`` and return its id.

    The caller holds the store (``memkiln.io.lock.hold_store``), so any other run still
    ``running``, except this run's parent, was left by a process that is gone: it is closed
    as ``abandoned`` here.
    """
    run_id = uuid.uuid4().hex
    _STARTED.append(run_id)
    parent, flow_run = _RUN_LINKS.get()
    con.execute(
        sql("close_abandoned_runs"), {"run_id": run_id, "parent_run_id": parent, "at": now()}
    )
    execute(
        con,
        "start_run",
        run_id=run_id,
        command=command,
        archive=archive,
        started_at=now(),
        parent=parent,
        flow_run=flow_run,
        pid=os.getpid(),
    )
    return run_id


def finish_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    *,
    status: str,
    counts: Counters,
    error: str | None = None,
) -> None:
    """Close a run with its status and counters."""
    unknown = set(counts) - set(RUN_COUNTERS)
    if unknown:
        raise ValueError(f"unknown run counters: {sorted(unknown)}")
    given = {name: counts.get(name, 0) for name in RUN_COUNTERS}  # a run counts from 0
    execute(con, "finish_run", **given, run_id=run_id, status=status, error=error, ended_at=now())


def audits(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Run every ``sql/audits`` query; returns the rows each found (all must be zero)."""
    found = {}
    for entry in sorted(_sql_dir("audits").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            found[entry.name[:-4]] = len(con.execute(entry.read_text("utf-8")).fetchall())
    return found


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Row counts of the stage tables (for summaries and idempotency checks)."""
    found = execute(con, "table_counts")
    names = [d[0] for d in found.description]
    return dict(zip(names, found.fetchall()[0], strict=True))


def fetch_pl(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> pl.DataFrame:
    """Run a query and return a Polars frame (through Arrow, no Python rows)."""
    import polars as pl

    # from_arrow of a table (not an array) is a DataFrame
    return pl.from_arrow(con.sql(query, params=params).to_arrow_table())  # type: ignore[return-value]
