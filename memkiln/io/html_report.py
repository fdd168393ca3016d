"""``memkiln report``: one self-contained HTML file with the charts and tables of a database.

Nothing in the file is fetched from the network: the chart library (Vega, Vega-Lite and
vega-embed) is inlined from the bundle that the ``vl-convert-python`` package ships, and the
data is inlined in the chart specifications. Every value shown comes from the database, where
texts are redacted; the tables are HTML-escaped and the specifications are JSON with ``</``
written ``<\\/``, so no value can close the script or add markup.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from urllib.parse import quote

import altair as alt
import jinja2
import polars as pl
from markupsafe import Markup, escape

from memkiln.io.analytics import ACTIVE_DAYS, Frames, connect_read_only, frames
from memkiln.io.store import execute
from memkiln.transforms.charts import all_charts

#: Rows of a table shown in the report (the rest is counted in a note).
MAX_ROWS = 200


@dataclass(frozen=True)
class ReportResult:
    path: Path
    charts: int
    projects: int
    bytes: int


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


def _cell(value: object) -> tuple[str, Markup]:
    if value is None:
        return "text", Markup("")
    if isinstance(value, bool):
        return "text", escape("yes" if value else "no")
    if isinstance(value, float):
        return "num", escape(f"{value:,.4f}".rstrip("0").rstrip(".") if value else "0")
    if isinstance(value, int):
        return "num", escape(f"{value:,}")
    if isinstance(value, datetime):
        return "text", escape(value.strftime("%Y-%m-%d %H:%M"))
    return "text", escape(str(value))


def html_table(frame: pl.DataFrame, *, links: dict[str, list[str | None]] | None = None) -> Markup:
    """An escaped HTML table of ``frame``; ``links`` maps a column to an href per row."""
    if frame.is_empty():
        return Markup("<p><em>nothing recorded</em></p>")
    links = links or {}
    head = "".join(f"<th>{escape(c)}</th>" for c in frame.columns)
    rows = []
    for i, row in enumerate(frame.head(MAX_ROWS).iter_rows()):
        cells = []
        for column, value in zip(frame.columns, row, strict=True):
            kind, text = _cell(value)
            href = links.get(column, [None] * frame.height)[i]
            if href:
                text = Markup(f'<a href="{escape(href)}">{text}</a>')
            cells.append(f'<td class="{kind}">{text}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        f"<p>{frame.height - MAX_ROWS:,} more rows in the database.</p>"
        if frame.height > MAX_ROWS
        else ""
    )
    return Markup(f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}")


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


def render(
    answers: Frames, *, db: Path, memories: Path, report_dir: Path, newest: datetime | None
) -> tuple[str, int]:
    """The report's HTML and the number of charts in it."""
    charts = all_charts(
        sessions_daily=answers.sessions_daily,
        tool_failures=answers.tool_failures,
        failures=answers.failures,
        costs=answers.costs,
    )
    specs = {name: chart.to_dict() for name, chart in charts.items()}
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: (resources.files("memkiln") / "templates" / name).read_text("utf-8")
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    projects = answers.projects
    links = _folder_links(projects, memories=memories, report_dir=report_dir)
    html = env.get_template("report.html").render(
        db=str(db),
        memories=str(memories),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        newest=newest.strftime("%Y-%m-%d %H:%M") if newest else None,
        active_days=ACTIVE_DAYS,
        charts=list(specs),
        tables={
            "last_run": html_table(answers.last_run),
            "failures": html_table(answers.failures),
            "projects": html_table(projects, links={"folder": links}),
            "tool_failures": html_table(answers.tool_failures),
            "costs": html_table(answers.costs),
        },
        bundle=Markup(chart_library()),
        specs=Markup(_script_safe(json.dumps(specs, default=str))),
    )
    return html, len(specs)


def write_report(db: Path, out: Path, *, memories: Path) -> ReportResult:
    """Read ``db`` (read-only) and write the report to ``out`` (atomically)."""
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
        path=out, charts=n_charts, projects=answers.projects.height, bytes=len(html.encode())
    )
