"""The notebook's parts, shown three ways: by marimo (``marimo edit`` / ``marimo run``), as
text when the notebook runs as a script (``python notebooks/overview.py`` prints its
tables), and as one static HTML page that opens offline (``python notebooks/overview.py
--html overview.html``).

marimo's own ``export html`` writes a page that loads marimo's front end from a CDN, so it
shows nothing offline. The static page here is drawn like ``memkiln report``: the tables as
escaped HTML, the charts as Vega-Lite specifications drawn by the chart library inlined from
the ``vl-convert-python`` package; nothing is fetched.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import altair as alt
import polars as pl
from markupsafe import Markup

from memkiln.io.html_report import html_table, render_page
from memkiln.transforms.charts import EMPTY

#: Rows of a table printed by the script (the static page shows up to html_report.MAX_ROWS).
PRINTED_ROWS = 30
#: Characters of a printed table's line, and of one value in it.
PRINTED_WIDTH = 200
PRINTED_VALUE = 48


@dataclass(frozen=True)
class Part:
    """A part of the notebook: markdown text, tables (Polars frames) and charts (Altair), in
    the order shown."""

    items: tuple[Any, ...]

    def _display_(self) -> Any:
        """What marimo shows: the items stacked, markdown rendered."""
        import marimo as mo

        return mo.vstack([mo.md(x) if isinstance(x, str) else x for x in self.items])


def part(*items: Any) -> Part:
    """A part of the notebook of ``items``: markdown strings, Polars frames, Altair charts."""
    for item in items:
        if not isinstance(item, str | pl.DataFrame | alt.TopLevelMixin):
            raise TypeError(f"a notebook part holds text, frames and charts, not {type(item)}")
    return Part(tuple(items))


def _title(chart: alt.TopLevelMixin) -> str:
    title = chart.to_dict().get("title", "")
    return title if isinstance(title, str) else str(title.get("text", ""))


def print_parts(parts: Iterable[Part], out: IO[str] | None = None) -> None:
    """The notebook as text: markdown as written, every table printed whole in its columns
    (up to ``PRINTED_ROWS`` rows), each chart by its title and the rows it draws."""
    out = out or sys.stdout
    with pl.Config(
        tbl_rows=PRINTED_ROWS,
        tbl_cols=-1,
        tbl_width_chars=PRINTED_WIDTH,
        fmt_str_lengths=PRINTED_VALUE,
        tbl_hide_dataframe_shape=False,
        tbl_hide_column_data_types=True,
    ):
        for p in parts:
            for item in p.items:
                if isinstance(item, str):
                    print(_dedent(item), file=out)
                elif isinstance(item, pl.DataFrame):
                    print(
                        _printable(item) if not item.is_empty() else "(nothing recorded)", file=out
                    )
                elif item.to_dict().get("description") == EMPTY:
                    print(f"[chart] {_title(item)}: {EMPTY}", file=out)
                else:
                    rows = _chart_rows(item)
                    print(f"[chart] {_title(item)}: {rows:,} rows drawn", file=out)
                print(file=out)


def _printable(frame: pl.DataFrame) -> pl.DataFrame:
    """Times to the minute, shares and dollars to four places: the columns stay narrow."""
    return frame.with_columns(
        pl.col(pl.Datetime).dt.strftime("%Y-%m-%d %H:%M"), pl.col(pl.Float64).round(4)
    )


def _chart_rows(chart: alt.TopLevelMixin) -> int:
    data = chart.to_dict().get("datasets", {})
    return sum(len(rows) for rows in data.values())


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip()


def render_parts(parts: Iterable[Part], *, title: str) -> tuple[str, int]:
    """The notebook as one static HTML page, and the number of charts in it."""
    import marimo as mo

    blocks: list[Markup] = []
    specs: dict[str, Any] = {}
    for p in parts:
        for item in p.items:
            if isinstance(item, str):
                # markdown rendered by marimo itself (plain HTML: headings, paragraphs, code)
                blocks.append(Markup(mo.md(_dedent(item)).text))
            elif isinstance(item, pl.DataFrame):
                blocks.append(html_table(item))
            else:
                name = f"c{len(specs) + 1}"
                specs[name] = item.to_dict()
                blocks.append(Markup(f'<div class="chart" id="chart-{name}"></div>'))
    html = render_page(
        "notebook.html",
        specs=specs,
        title=title,
        blocks=blocks,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
    )
    return html, len(specs)


def show(parts: Iterable[Part], *, html: object = None, title: str = "memkiln notebook") -> None:
    """The notebook run as a script: print its parts; with ``--html PATH`` (marimo's
    ``cli_args``), also write them as one static page to PATH."""
    began = time.monotonic()
    parts = list(parts)
    print_parts(parts)
    if html is None:
        return
    if not isinstance(html, str) or not html:
        raise SystemExit(f"--html takes one file name (--html overview.html), not {html!r}")
    page, charts = render_parts(parts, title=title)
    path = Path(html).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    took = time.monotonic() - began
    print(
        f"wrote {path} ({len(page.encode()) / 1e6:.1f} MB): {charts} charts, in {took:.1f} s",
        file=sys.stderr,
    )
