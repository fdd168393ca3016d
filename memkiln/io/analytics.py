"""Reading a memkiln database for analysis: the notebook's and the report's one way in.

``connect_read_only`` is the single place that opens a database for reading (the notebook
and ``memkiln report`` both use it); ``frames`` runs the named queries that answer the
questions a user asks the morning after a run. The queries are in ``sql/queries/report_*.sql``
and read the views of ``sql/views``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from memkiln.errors import MemkilnError
from memkiln.io.store import fetch_pl, sql

#: Days, up to the newest session, in which a project counts as active.
ACTIVE_DAYS = 30


def connect_read_only(db: Path | str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the latest published state of a memkiln database, its
    views included (``memkiln.connect``): it never waits for a run nor stops one.

    Raises ``MemkilnError`` (one line) when there is no database there.
    """
    from memkiln.io.snapshot import connect

    return connect(Path(db))


@dataclass(frozen=True)
class Frames:
    """The answers, as Polars frames."""

    last_run: pl.DataFrame  # what happened last night (report_last_run.sql)
    failures: pl.DataFrame  # what failed and why (report_failures.sql)
    tool_failures: pl.DataFrame  # tool calls per project and tool (report_tool_failures.sql)
    costs: pl.DataFrame  # what it cost (report_costs.sql)
    projects: pl.DataFrame  # which projects are active (report_projects.sql)
    sessions_daily: pl.DataFrame  # v_sessions_daily
    redactions: pl.DataFrame  # v_redactions


def frames(con: duckdb.DuckDBPyConnection, *, active_days: int = ACTIVE_DAYS) -> Frames:
    """Run every report query on ``con``."""
    try:
        return _frames(con, active_days=active_days)
    except duckdb.CatalogException as exc:
        raise MemkilnError(
            "this database was written by an older memkiln (its views are missing); run "
            "'memkiln ingest' or 'memkiln run' once to upgrade it"
        ) from exc


def _frames(con: duckdb.DuckDBPyConnection, *, active_days: int) -> Frames:
    return Frames(
        last_run=fetch_pl(con, sql("report_last_run")),
        failures=fetch_pl(con, sql("report_failures")),
        tool_failures=fetch_pl(con, sql("report_tool_failures")),
        costs=fetch_pl(con, sql("report_costs")),
        projects=fetch_pl(con, sql("report_projects"), {"days": active_days}),
        sessions_daily=fetch_pl(con, "from v_sessions_daily"),
        redactions=fetch_pl(con, "from v_redactions"),
    )
