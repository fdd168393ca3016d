"""``memkiln report``: one self-contained HTML file with the charts and tables of a database.

Nothing in the file is fetched from the network: the chart library (Vega, Vega-Lite and
vega-embed) is inlined from the bundle that the ``vl-convert-python`` package ships, and the
data is inlined in the chart specifications. Every value shown comes from the database, where
texts are redacted; the tables are HTML-escaped and the specifications are JSON with ``</``
written ``<\\/``, so no value can close the script or add markup.

The page fits a 1280-pixel screen: a status banner first (the last run: ok or failed, its
sessions, cost and time), tables whose long values wrap only between their parts (after a
``/``, ``.``, ``_``, ``-``, …; never inside a word) and charts that name only their largest
entries (``memkiln.transforms.charts``). The notebook's static page
(``memkiln.io.notebook_page``) is drawn with the same pieces.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import altair as alt
import jinja2
import polars as pl
from markupsafe import Markup, escape

from memkiln.io.analytics import ACTIVE_DAYS, Frames, connect_read_only, frames
from memkiln.io.store import execute
from memkiln.transforms.charts import all_charts
from memkiln.transforms.report import took

#: Rows of a table shown in the report (the rest is counted in a note).
MAX_ROWS = 200
#: Characters of a text cell shown (the whole value is in the cell's tooltip).
MAX_TEXT = 240
#: A run of characters with no place to wrap (a hash, a key) gets one every so many.
MAX_UNBROKEN = 24

#: Where a long value may wrap: after these characters (paths, URLs, keys, snake_case).
_BREAK_AFTER = re.compile(r"([/\\._\-:,;=&?@+|])")
_UNBROKEN = re.compile(rf"[^\s\0/\\._\-:,;=&?@+|]{{{MAX_UNBROKEN + 1},}}")


@dataclass(frozen=True)
class ReportResult:
    path: Path
    charts: int
    projects: int
    bytes: int
    #: how long reading the database and writing the file took
    seconds: float = 0.0


@cache
def chart_library() -> str:
    """Vega, Vega-Lite and vega-embed as one ES module (``vegaEmbed`` in scope), from the
    installed vl-convert package, for the Vega-Lite version Altair writes."""
    import vl_convert as vlc

    version = "_".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    try:
        # vl-convert's stub marks ``snippet`` required; it is optional (the default snippet
        # puts vegaEmbed in scope)
        return vlc.javascript_bundle(vl_version=version)  # type: ignore[call-arg]
    except ValueError:  # a vl-convert that does not know Altair's version: its default
        return vlc.javascript_bundle()  # type: ignore[call-arg]


def _script_safe(text: str) -> str:
    """Text that cannot end a ``<script>`` element early."""
    return text.replace("</", "<\\/")


def wrappable(text: str) -> Markup:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after each separator of a
    path, URL or identifier and inside runs too long to fit a column, so that a table column
    narrows without breaking a word in the middle or pushing the table off the page."""

    def cut(run: re.Match[str]) -> str:
        word = run.group()
        return "\0".join(word[i : i + MAX_UNBROKEN] for i in range(0, len(word), MAX_UNBROKEN))

    marked = _UNBROKEN.sub(cut, _BREAK_AFTER.sub("\\1\0", text.replace("\0", "")))
    return Markup("<wbr>").join(escape(part) for part in marked.split("\0"))


def _cell(value: object) -> tuple[str, Markup, str | None]:
    """A cell's class, its content, and its tooltip (the whole value when it was cut)."""
    if value is None:
        return "text", Markup(""), None
    if isinstance(value, bool):
        return "text", escape("yes" if value else "no"), None
    if isinstance(value, float):
        return "num", escape(f"{value:,.4f}".rstrip("0").rstrip(".") if value else "0"), None
    if isinstance(value, int):
        return "num", escape(f"{value:,}"), None
    if isinstance(value, datetime):
        return "time", escape(value.strftime("%Y-%m-%d %H:%M")), None
    text = " ".join(str(value).split())
    if len(text) > MAX_TEXT:
        return "text", wrappable(text[: MAX_TEXT - 1] + "…"), text
    return "text", wrappable(text), None


def heading(column: str) -> str:
    """A column name as a table heading: ``sessions_no_output`` reads "sessions no output"."""
    return column.replace("_", " ")


def html_table(frame: pl.DataFrame, *, links: dict[str, list[str | None]] | None = None) -> Markup:
    """An escaped HTML table of ``frame``; ``links`` maps a column to an href per row."""
    if frame.is_empty():
        return Markup("<p><em>nothing recorded</em></p>")
    links = links or {}
    head = "".join(f"<th>{escape(heading(c))}</th>" for c in frame.columns)
    rows = []
    for i, row in enumerate(frame.head(MAX_ROWS).iter_rows()):
        cells = []
        for column, value in zip(frame.columns, row, strict=True):
            kind, text, whole = _cell(value)
            href = links.get(column, [None] * frame.height)[i]
            if href:
                text = Markup(f'<a href="{escape(href)}">{text}</a>')
            title = f' title="{escape(whole)}"' if whole else ""
            cells.append(f'<td class="{kind}"{title}>{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f"<p>{frame.height - MAX_ROWS:,} more rows in the database.</p>"
        if frame.height > MAX_ROWS
        else ""
    )
    return Markup(
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"
    )


def _folder_links(projects: pl.DataFrame, *, memories: Path, report_dir: Path) -> list[str | None]:
    """Relative links from the report's folder to each project's memory folder."""
    links: list[str | None] = []
    for folder in projects["folder"].to_list():
        if not folder:
            links.append(None)
            continue
        target = memories / folder
        rel = os.path.relpath(target, report_dir)
        links.append(quote(Path(rel).as_posix()) + "/")
    return links


def duration(seconds: float | None) -> str:
    """``3.2 s``, ``4 min 05 s``, ``2 h 07 min``."""
    return "not ended" if seconds is None else took(seconds)


def cost(value: float | None) -> str:
    return "unknown (a model's price is not known)" if value is None else f"${value:,.4f}"


def banner(latest: pl.DataFrame) -> dict[str, Any]:
    """The banner's state (ok, failed, running, none), headline and facts, from
    ``report_banner.sql``'s one row."""
    if latest.is_empty():
        return {"state": "none", "headline": "No run recorded yet", "facts": [], "error": None}
    r = latest.row(0, named=True)
    status = r["status"]
    state = {"succeeded": "ok", "running": "running"}.get(status, "failed")
    what = "dry run" if r["dry_run"] else "run"
    command = f"memkiln {r['command']}" + (" --dry-run" if r["dry_run"] else "")
    when = r["started_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sessions = (
        f"{r['sessions_done']:,} done: {r['sessions_succeeded']:,} with a memory, "
        f"{r['sessions_no_output']:,} with nothing durable, {r['sessions_failed']:,} failed"
    )
    facts = [
        ("command", command),
        ("started", when),
        ("took", duration(r["seconds"])),
        ("sessions", sessions),
        ("projects", f"{r['projects_written']:,} written, {r['projects_failed']:,} failed"),
        ("model requests", f"{r['model_requests']:,}"),
        ("cost", cost(r["cost_usd"])),
    ]
    if r["phases"]:
        facts.append(("phases", r["phases"]))
    return {
        "state": state,
        "headline": f"Last {what} {status}",
        "facts": facts,
        "error": r["error"],
    }


@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: (resources.files("memkiln") / "templates" / name).read_text("utf-8")
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render_page(template: str, *, specs: dict[str, Any], **values: Any) -> str:
    """A page of ``templates/<template>`` (which extends ``report_page.html``): its values,
    the chart specifications by element id, and the chart library inlined."""
    return (
        _templates()
        .get_template(template)
        .render(
            bundle=Markup(chart_library()),
            specs=Markup(_script_safe(json.dumps(specs, default=str))),
            charts=list(specs),
            **values,
        )
    )


def render(
    answers: Frames, *, db: Path, memories: Path, report_dir: Path, newest: datetime | None
) -> tuple[str, int]:
    """The report's HTML and the number of charts in it."""
    charts = all_charts(
        run_history=answers.run_history,
        sessions_daily=answers.sessions_daily,
        failures=answers.failures,
        tool_failures=answers.tool_failures,
        projects=answers.projects,
        costs=answers.costs,
    )
    specs = {name: chart.to_dict() for name, chart in charts.items()}
    projects = answers.projects
    links = _folder_links(projects, memories=memories, report_dir=report_dir)
    history = answers.run_history.sort("started_at", descending=True)
    html = render_page(
        "report.html",
        specs=specs,
        db=str(db),
        memories=str(memories),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        newest=newest.strftime("%Y-%m-%d %H:%M") if newest else None,
        active_days=ACTIVE_DAYS,
        banner=banner(answers.banner),
        tables={
            "last_run": html_table(answers.last_run),
            "run_history": html_table(history),
            "failures": html_table(answers.failures),
            "projects": html_table(projects, links={"folder": links}),
            "tool_failures": html_table(answers.tool_failures),
            "costs": html_table(answers.costs),
            "estimates": html_table(answers.estimates),
        },
    )
    return html, len(specs)


def write_report(db: Path, out: Path, *, memories: Path) -> ReportResult:
    """Read ``db`` (read-only) and write the report to ``out`` (atomically)."""
    began = time.monotonic()
    con = connect_read_only(db)
    try:
        answers = frames(con)
        newest = execute(con, "newest_session").fetchall()[0][0]
    finally:
        con.close()
    out = out.resolve()
    html, n_charts = render(
        answers, db=db, memories=memories.resolve(), report_dir=out.parent, newest=newest
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return ReportResult(
        path=out,
        charts=n_charts,
        projects=answers.projects.height,
        bytes=len(html.encode()),
        seconds=time.monotonic() - began,
    )
