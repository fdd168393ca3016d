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
#: Runs shown in the run history, and dry runs beside what the next run spent.
HISTORY_RUNS = 60
ESTIMATES = 10


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

    banner: pl.DataFrame  # the latest run, one row (report_banner.sql)
    last_run: pl.DataFrame  # what happened last night (report_last_run.sql)
    run_history: pl.DataFrame  # the latest runs over time (report_run_history.sql)
    failures: pl.DataFrame  # what failed in memkiln and why (report_failures.sql)
    tool_failures: pl.DataFrame  # the agents' tool calls per kind (report_tool_failures.sql)
    costs: pl.DataFrame  # what it cost (report_costs.sql)
    estimates: pl.DataFrame  # dry-run estimates beside what was spent (report_estimates.sql)
    projects: pl.DataFrame  # which projects are active (report_projects.sql)
    sessions_daily: pl.DataFrame  # v_sessions_daily
    redactions: pl.DataFrame  # v_redactions


def frames(con: duckdb.DuckDBPyConnection, *, active_days: int = ACTIVE_DAYS) -> Frames:
    """Run every report query on ``con``."""
    try:
        return _frames(con, active_days=active_days)
    except (duckdb.CatalogException, duckdb.BinderException) as exc:
        # a view or a column of one is missing: the readers' copy holds the views of the
        # memkiln that last wrote it
        raise MemkilnError(
            "this database was written by an older memkiln (its views are missing or older); "
            "run 'memkiln ingest' or 'memkiln run' once to upgrade it"
        ) from exc


def _frames(con: duckdb.DuckDBPyConnection, *, active_days: int) -> Frames:
    return Frames(
        banner=fetch_pl(con, sql("report_banner")),
        last_run=fetch_pl(con, sql("report_last_run")),
        run_history=fetch_pl(con, sql("report_run_history"), {"limit": HISTORY_RUNS}),
        failures=fetch_pl(con, sql("report_failures")),
        tool_failures=fetch_pl(con, sql("report_tool_failures")),
        costs=fetch_pl(con, sql("report_costs")),
        estimates=fetch_pl(con, sql("report_estimates"), {"limit": ESTIMATES}),
        projects=fetch_pl(con, sql("report_projects"), {"days": active_days}),
        sessions_daily=fetch_pl(con, "from v_sessions_daily"),
        redactions=fetch_pl(con, "from v_redactions"),
    )
