"""What ``memkiln status``, ``memkiln projects`` and ``memkiln show`` read and print.

All three read the published copy of the store (``memkiln.io.snapshot``), so they answer
while a run writes and never stand in its way. ``status`` and ``projects`` read plain rows
(no Polars, no redaction rules to load), so that they answer in about a second.
"""

from __future__ import annotations

import difflib
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memkiln.errors import ConfigError
from memkiln.io.snapshot import connect, snapshot_path
from memkiln.io.store import sql, table_counts
from memkiln.transforms.names import project_dirname
from memkiln.transforms.text import clean_text

if TYPE_CHECKING:
    import polars as pl

#: Rows shown per section of ``memkiln status``.
STATUS_RUNS = 5
STATUS_PROJECTS = 10
STATUS_FAILURES = 5
#: Candidates named by an ambiguous or unknown ``show`` argument.
SHOWN_CANDIDATES = 10
#: Columns of tables written to a pipe or a file.
PIPE_WIDTH = 200


def shown(value: str | None) -> Text:
    """A value from the sessions or the store (a project key, an error) as a table cell: on
    one line, without control characters or terminal escapes, never read as Rich markup."""
    return Text(" ".join(clean_text(value or "").split()))


def status_report(db: Path) -> dict[str, Any]:
    """Everything ``memkiln status`` shows, as one JSON-ready object."""
    con = connect(db)
    try:
        projects = _fetch(con, sql("project_list"))
        by_phase: dict[str, dict[str, int]] = {"extract": {}, "consolidate": {}}
        for phase, state, n in con.execute(sql("status_jobs")).fetchall():
            by_phase[phase][state] = n
        return {
            "database": str(db),
            "as_of": _as_of(db),
            "tables": table_counts(con),
            "jobs": by_phase,
            "projects": {"count": len(projects), "recent": projects[:STATUS_PROJECTS]},
            "runs": _fetch(con, sql("status_runs"), {"limit": STATUS_RUNS}),
            "failures": _fetch(con, sql("status_failures"), {"limit": STATUS_FAILURES}),
            # the latest selection's sessions per reason (as memkiln.io.jobs.selection_reasons)
            "selection": [
                {"decision": str(d), "reason": str(r), "sessions": int(n)}
                for d, r, n in con.execute(sql("selection_reasons")).fetchall()
            ],
            "publications": _publications(con),
        }
    finally:
        con.close()


def _publications(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Files ``memkiln publish`` placed per agent and status (none in a store from before
    publishing existed)."""
    try:
        return _fetch(con, sql("status_publications"))
    except duckdb.CatalogException:
        return []


def _as_of(db: Path) -> str:
    """When the state readers see was published."""
    stamp = snapshot_path(db).stat().st_mtime
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _fetch(
    con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """A query's rows as JSON-ready dicts."""
    found = con.execute(query, params)
    names = [d[0] for d in found.description]
    return [{k: _plain(v) for k, v in zip(names, row, strict=True)} for row in found.fetchall()]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds")
    if isinstance(value, Decimal):  # sums of integers come back as decimals
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def print_json(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def wide(console: Console) -> Console:
    """Output to a pipe or file is not cut at 80 columns (a project key is shown whole)."""
    return console if console.is_terminal else Console(file=console.file, width=PIPE_WIDTH)


def print_status(report: dict[str, Any], console: Console) -> None:
    """``memkiln status`` as tables a person reads."""
    console = wide(console)
    tables = report["tables"]
    console.print(
        f"{report['database']} as of {report['as_of']}: "
        + ", ".join(f"{name}: {n:,}" for name, n in tables.items()),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    jobs = Table(title="jobs")
    for column in ("phase", "state", "jobs"):
        jobs.add_column(column, justify="right" if column == "jobs" else "left")
    for phase, states in report["jobs"].items():
        for state, n in states.items():
            jobs.add_row(phase, state, f"{n:,}")
    console.print(jobs)
    # a running run's row shows what it has done so far (status_runs.sql)
    runs = Table(title=f"last {STATUS_RUNS} runs")
    columns = ["run", "command", "status", "started (UTC)", "seconds", "sessions", "items"]
    columns += ["projects", "cost (USD)", "failed"]
    numeric = ("seconds", "sessions", "items", "projects", "cost (USD)")
    for column in columns:
        runs.add_column(column, justify="right" if column in numeric else "left")
    for r in report["runs"]:
        sessions = r["sessions_succeeded"] + r["sessions_no_output"]
        failed = r["sessions_failed"] + r["projects_failed"]
        runs.add_row(
            r["run_id"][:12],
            r["command"],
            r["status"],
            (r["started_at"] or "")[:19].replace("T", " "),
            f"{r['seconds']:,.1f}",
            f"{sessions:,}",
            f"{r['items'] or 0:,}",
            f"{r['projects_written']:,}",
            "unknown" if r["cost_usd"] is None else f"{r['cost_usd']:,.4f}",
            shown(f"{failed:,}" + (f" ({r['error'][:60]})" if r["error"] else "")),
        )
    console.print(runs)
    projects = report["projects"]
    listed = len(projects["recent"])
    console.print(_project_table(projects["recent"], f"projects ({listed} of {projects['count']})"))
    failures = Table(title="top failure reasons")
    for column in ("phase", "reason", "jobs", "example"):
        failures.add_column(column, justify="right" if column == "jobs" else "left")
    for f in report["failures"]:
        failures.add_row(f["phase"], shown(f["reason"]), f"{f['jobs']:,}", shown(f["example"]))
    if not report["failures"]:
        failures.add_row("", "none", "", "")
    console.print(failures)
    selection = Table(title="selection reasons")
    for column in ("decision", "reason", "sessions"):
        selection.add_column(column, justify="right" if column == "sessions" else "left")
    for row in report["selection"]:
        selection.add_row(row["decision"], row["reason"], f"{row['sessions']:,}")
    if not report["selection"]:
        selection.add_row("", "no selection yet", "")
    console.print(selection)
    published = Table(title="published to agents (memkiln publish; v_publications)")
    for column in ("agent", "status", "files", "last changed (UTC)"):
        published.add_column(column, justify="right" if column == "files" else "left")
    for row in report.get("publications", []):
        changed = (row["last_changed_at"] or "")[:19].replace("T", " ")
        published.add_row(row["target"], row["status"], f"{row['files']:,}", changed)
    if not report.get("publications"):
        published.add_row("", "nothing published", "", "")
    console.print(published)


def _project_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    # a key is shown whole (it is what 'memkiln show' takes), the other columns give way
    widest = max((len(p["project_key"]) for p in rows), default=7)
    table.add_column("project", min_width=min(widest, 72), overflow="fold")
    for column in ("sessions", "items", "last active (UTC)", "memories", "memory"):
        numeric = column in ("sessions", "items", "memories")
        table.add_column(column, justify="right" if numeric else "left")
    for p in rows:
        table.add_row(
            shown(p["project_key"]),
            f"{p['sessions']:,}",
            f"{p['items'] or 0:,}",
            (p["last_active_at"] or "")[:16].replace("T", " "),
            f"{p['memories']:,}",
            p["consolidation_status"] or "none yet",
        )
    return table


def project_list(db: Path) -> list[dict[str, Any]]:
    """Every project, most recently active first (``memkiln projects``)."""
    con = connect(db)
    try:
        return _fetch(con, sql("project_list"))
    finally:
        con.close()


def print_projects(rows: list[dict[str, Any]], console: Console) -> None:
    console = wide(console)
    console.print(_project_table(rows, f"{len(rows)} projects"))


class UnknownProject(ConfigError):
    """No project matches a name."""


def find_project(con: duckdb.DuckDBPyConnection, query: str) -> tuple[str, str]:
    """The key and memory folder of the one project ``query`` names; a ``ConfigError`` that
    lists the candidates when it names none or several."""
    import polars as pl

    from memkiln.io.rules import load_rules
    from memkiln.io.store import fetch_pl
    from memkiln.transforms.lookup import match_directory, match_project, names_a_directory

    projects = fetch_pl(con, sql("project_list")).select("project_key", "folder")
    projects = projects.with_columns(
        folder=pl.coalesce(
            "folder",
            pl.col("project_key").map_batches(_dirnames, return_dtype=pl.String),
        )
    )
    cwds = fetch_pl(con, sql("project_cwds"))
    rules = load_rules()
    local = Path(query).expanduser()
    if names_a_directory(query):  # ".", "~/src/shop", "./web": a directory, never a name
        where = local.resolve()
        found = match_directory(str(where), projects, cwds, rules=rules)
        if not found.keys:
            raise UnknownProject(
                f"no project's sessions ran in {where} ({query!r}) or a folder above it; "
                "'memkiln projects' lists them all"
            )
    else:
        found = match_project(query, projects, cwds, rules=rules)
        if not found.keys and local.is_dir():  # "shop", a folder here named as no project is
            found = match_directory(str(local.resolve()), projects, cwds, rules=rules)
    if len(found.keys) > 1:
        listed = ", ".join(shown(k).plain for k in found.keys[:SHOWN_CANDIDATES])
        more = len(found.keys) - SHOWN_CANDIDATES
        raise ConfigError(
            f"{query!r} is ambiguous: it matches {len(found.keys)} projects by {found.tier}: "
            f"{listed}{f' and {more} more' if more > 0 else ''}; give more of the name, "
            "the remote URL or the directory"
        )
    if not found.keys:
        keys = projects["project_key"].to_list()
        close = difflib.get_close_matches(query, keys, n=SHOWN_CANDIDATES, cutoff=0.3)
        listed = ", ".join(shown(k).plain for k in close or keys[:SHOWN_CANDIDATES])
        raise UnknownProject(
            f"no project matches {query!r}; "
            + (f"candidates: {listed}" if listed else "the store has no projects yet")
            + " ('memkiln projects' lists them all)"
        )
    key = found.keys[0]
    folder = projects.filter(pl.col("project_key") == key)["folder"][0]
    return key, folder


def _dirnames(keys: pl.Series) -> pl.Series:
    import polars as pl

    return pl.Series([project_dirname(k) for k in keys.to_list()], dtype=pl.String)


def memory_summary(db: Path, out: Path, query: str) -> str:
    """The ``memory_summary.md`` of the project ``query`` names (``memkiln show``)."""
    if not db.exists() and not snapshot_path(db).exists():
        return _summary_by_folder(out, query)
    con = connect(db)
    try:
        key, folder = find_project(con, query)
    except UnknownProject as exc:  # a folder under --out that this store does not know
        try:
            return _summary_by_folder(out, query)
        except ConfigError:
            raise UnknownProject(f"{exc}; {out}/INDEX.md lists the memory folders") from None
    finally:
        con.close()
    path = out / folder / "memory_summary.md"
    if not path.is_file():
        raise ConfigError(
            f"project {key} has no memory_summary.md under {out / folder}: none of its "
            "sessions has given a memory yet, or it was not consolidated into this --out "
            "('memkiln projects' shows its memories)"
        )
    return path.read_text(encoding="utf-8")


def _summary_by_folder(out: Path, query: str) -> str:
    """Without a store: the project by its key or folder name under ``out``."""
    for folder in (query, project_dirname(query)):
        if "/" in folder or folder in ("", ".", ".."):
            continue
        path = out / folder / "memory_summary.md"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise ConfigError(f"no memory for {query!r} under {out}; see {out}/INDEX.md for the projects")
