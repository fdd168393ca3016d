"""Charts of a memkiln database, as Altair (Vega-Lite) specifications. Pure: frames in,
charts out; the notebook shows them, ``memkiln report`` embeds them in one HTML file.

A chart names at most a few things by colour or by row (``TOP_COLOURS``, ``TOP_ROWS``): the
largest ones, the rest summed into one "other" entry that says how many it holds, so that a
store of fifty projects does not draw a fifty-colour legend.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import altair as alt
import polars as pl

WIDTH = 560
HEIGHT = 220
#: Things told apart by colour in one chart (the rest are one "other" colour).
TOP_COLOURS = 8
#: Rows of a horizontal bar chart (the rest are one "other" row).
TOP_ROWS = 12
#: Characters of an axis or legend label before Vega cuts it with an ellipsis.
LABEL_CHARS_PX = 260

#: The description of a chart with nothing to draw.
EMPTY = "no data yet"
#: Colours of the named entries, largest first; the "other" entry is grey.
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#9d755d")
OTHER_COLOUR = "#bdbdbd"

STATUS_COLOURS = {
    "succeeded": "#4c78a8",
    "failed": "#e45756",
    "interrupted": "#f58518",
    "abandoned": "#b279a2",
    "running": "#9d9d9d",
}


def _empty(title: str) -> alt.Chart:
    """A chart that says there is nothing to draw (Vega-Lite still renders it)."""
    return (
        alt.Chart(pl.DataFrame({"text": ["no data yet"]}), title=title)
        .mark_text(size=14)
        .encode(text="text:N")
        .properties(width=WIDTH, height=60, description=EMPTY)
    )


def top_n(frame: pl.DataFrame, *, key: str, weight: str, n: int, other: str) -> pl.DataFrame:
    """``frame`` with ``key`` kept for its ``n`` largest values by total ``weight`` and
    replaced by ``other (k)`` for the k others (one entry, so one colour or one row)."""
    totals = (
        frame.group_by(key).agg(pl.col(weight).sum()).sort([weight, key], descending=[True, False])
    )
    if totals.height <= n:
        return frame
    kept = totals.head(n)[key]
    label = f"{other} ({totals.height - n})"
    return frame.with_columns(
        pl.when(pl.col(key).is_in(kept.to_list()))
        .then(pl.col(key))
        .otherwise(pl.lit(label))
        .alias(key)
    )


def _legend(title: str) -> alt.Legend:
    return alt.Legend(title=title, orient="bottom", columns=2, labelLimit=LABEL_CHARS_PX * 2)


def _top_colours(data: pl.DataFrame, *, key: str, weight: str, other: str) -> alt.Scale:
    """Colours for ``key``'s entries, largest first, and grey for the ``other (k)`` one."""
    order = (
        data.group_by(key).agg(pl.col(weight).sum()).sort([weight, key], descending=[True, False])
    )
    names = order[key].to_list()
    rest = [n for n in names if n.startswith(f"{other} (")]
    named = [n for n in names if n not in rest]
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(named))]
    return alt.Scale(domain=named + rest, range=colours + [OTHER_COLOUR] * len(rest))


def sessions_per_day(sessions_daily: pl.DataFrame) -> alt.Chart:
    """Sessions started per day, stacked by project: the busiest projects by name."""
    if sessions_daily.is_empty():
        return _empty("Sessions per day, by project")
    projects = sessions_daily["project_key"].n_unique()
    title = "Sessions per day, by project" + (
        f" (the {TOP_COLOURS} busiest of {projects})" if projects > TOP_COLOURS else ""
    )
    data = top_n(
        sessions_daily.group_by("day", "project_key").agg(pl.col("sessions").sum()),
        key="project_key",
        weight="sessions",
        n=TOP_COLOURS,
        other="other projects",
    )
    data = data.group_by("day", "project_key").agg(pl.col("sessions").sum())
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            x=alt.X("day:T", title="day (UTC)"),
            y=alt.Y("sessions:Q", title="sessions"),
            color=alt.Color(
                "project_key:N",
                legend=_legend("project"),
                scale=_top_colours(
                    data, key="project_key", weight="sessions", other="other projects"
                ),
            ),
            tooltip=["day:T", "project_key:N", "sessions:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def time_format(span: timedelta) -> str:
    """The time axis's label format for points ``span`` apart at most: fine enough that two
    ticks never read the same (seconds within an hour, minutes within two days, else days)."""
    if span < timedelta(hours=1):
        return "%H:%M:%S"
    if span < timedelta(days=2):
        return "%m-%d %H:%M"
    return "%Y-%m-%d"


def runs_over_time(run_history: pl.DataFrame) -> alt.Chart:
    """Each run (a ``memkiln run`` with its phases, or a standalone command) as a point: when
    it started, how long it took, how it ended."""
    title = "Runs over time: how long each took, and how it ended"
    if run_history.is_empty():
        return _empty(title)
    data = run_history.with_columns(
        kind=pl.when(pl.col("dry_run")).then(pl.lit("dry run")).otherwise(pl.lit("run")),
        seconds=pl.col("seconds").fill_null(0.0),
    )
    statuses = [s for s in STATUS_COLOURS if s in set(data["status"].to_list())]
    starts = data["started_at"].drop_nulls()
    first, last = starts.min(), starts.max()
    span = (
        last - first if isinstance(first, datetime) and isinstance(last, datetime) else timedelta()
    )
    return (
        alt.Chart(data, title=title)
        .mark_point(filled=True, size=90)
        .encode(
            x=alt.X("started_at:T", title="started (UTC)", axis=alt.Axis(format=time_format(span))),
            y=alt.Y("seconds:Q", title="seconds"),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=statuses, range=[STATUS_COLOURS[s] for s in statuses]),
                legend=alt.Legend(title="status", orient="bottom"),
            ),
            shape=alt.Shape("kind:N", legend=alt.Legend(title=None, orient="bottom")),
            tooltip=[
                alt.Tooltip("started_at:T", format="%Y-%m-%d %H:%M"),
                "command:N",
                "status:N",
                "kind:N",
                "seconds:Q",
                "sessions_done:Q",
                "projects_written:Q",
                "model_requests:Q",
                "cost_usd:Q",
            ],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def failures_by_reason(failures: pl.DataFrame) -> alt.Chart:
    """memkiln's own failures per stage and reason (the agents' tool calls are apart)."""
    title = "What failed in memkiln, by stage and reason"
    if failures.is_empty():
        return _empty(title)
    data = top_n(
        failures.with_columns(what=pl.concat_str(["stage", "reason"], separator=": ")),
        key="what",
        weight="failures",
        n=TOP_ROWS,
        other="other reasons",
    )
    data = data.group_by("what").agg(
        pl.col("failures").sum(), stage=pl.col("stage").unique().sort().str.join(", ")
    )
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            y=alt.Y("what:N", title=None, sort="-x", axis=alt.Axis(labelLimit=LABEL_CHARS_PX)),
            x=alt.X("failures:Q", title="failures"),
            color=alt.Color("stage:N", legend=alt.Legend(title="stage", orient="bottom")),
            tooltip=["what:N", "failures:Q"],
        )
        .properties(width=WIDTH - 160, height=alt.Step(20))
    )


def _ok_failed(data: pl.DataFrame, *, key: str, calls: str, failed: str) -> pl.DataFrame:
    return (
        data.group_by(key)
        .agg(ok=(pl.col(calls) - pl.col(failed)).sum(), failed=pl.col(failed).sum())
        .unpivot(index=key, variable_name="outcome", value_name="calls")
    )


def _ok_failed_bars(data: pl.DataFrame, *, key: str, title: str) -> alt.Chart:
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            y=alt.Y(f"{key}:N", title=None, sort="-x", axis=alt.Axis(labelLimit=LABEL_CHARS_PX)),
            x=alt.X("calls:Q", title="tool calls"),
            color=alt.Color(
                "outcome:N",
                scale=alt.Scale(domain=["ok", "failed"], range=["#4c78a8", "#e45756"]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            tooltip=[f"{key}:N", "outcome:N", "calls:Q"],
        )
        .properties(width=WIDTH - 160, height=alt.Step(20))
    )


def tool_calls_by_kind(tool_failures: pl.DataFrame) -> alt.Chart:
    """The agents' tool calls per kind of tool (names merged across formats), ok and failed."""
    title = "The agents' tool calls, by kind of tool: ok and failed"
    if tool_failures.is_empty():
        return _empty(title)
    data = top_n(tool_failures, key="tool_kind", weight="calls", n=TOP_ROWS, other="other tools")
    return _ok_failed_bars(
        _ok_failed(data, key="tool_kind", calls="calls", failed="failed"),
        key="tool_kind",
        title=title,
    )


def tool_calls_by_project(projects: pl.DataFrame) -> alt.Chart:
    """The agents' tool calls per project, ok and failed: the projects with the most calls."""
    calls = projects.filter(pl.col("tool_calls") > 0)
    title = "The agents' tool calls, by project" + (
        f" (the {TOP_ROWS} with the most of {calls.height})" if calls.height > TOP_ROWS else ""
    )
    if calls.is_empty():
        return _empty(title)
    data = top_n(calls, key="project_key", weight="tool_calls", n=TOP_ROWS, other="other projects")
    return _ok_failed_bars(
        _ok_failed(data, key="project_key", calls="tool_calls", failed="failed_tool_calls"),
        key="project_key",
        title=title,
    )


def cost_per_day(costs: pl.DataFrame) -> alt.Chart:
    """Model tokens per day, by phase and model (requests and cost in the tooltip)."""
    title = "Model tokens per day, by phase and model"
    if costs.is_empty():
        return _empty(title)
    data = top_n(
        costs.with_columns(
            tokens=pl.col("input_tokens") + pl.col("output_tokens"),
            what=pl.concat_str(["phase", "model"], separator=" · "),
        ),
        key="what",
        weight="tokens",
        n=TOP_COLOURS,
        other="other models",
    )
    data = data.group_by("day", "what").agg(
        pl.col("model_requests").sum(), pl.col("tokens").sum(), pl.col("cost_usd").sum()
    )
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            x=alt.X("day:T", title="day (UTC)"),
            y=alt.Y("tokens:Q", title="tokens (in + out)"),
            color=alt.Color(
                "what:N",
                legend=_legend("phase · model"),
                scale=_top_colours(data, key="what", weight="tokens", other="other models"),
            ),
            tooltip=["day:T", "what:N", "model_requests:Q", "tokens:Q", "cost_usd:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def all_charts(
    *,
    run_history: pl.DataFrame,
    sessions_daily: pl.DataFrame,
    failures: pl.DataFrame,
    tool_failures: pl.DataFrame,
    projects: pl.DataFrame,
    costs: pl.DataFrame,
) -> dict[str, alt.Chart]:
    """Every chart of the report, by name (the name is the element id in the HTML)."""
    return {
        "runs": runs_over_time(run_history),
        "sessions": sessions_per_day(sessions_daily),
        "failures": failures_by_reason(failures),
        "tool_kinds": tool_calls_by_kind(tool_failures),
        "tool_projects": tool_calls_by_project(projects),
        "costs": cost_per_day(costs),
    }
