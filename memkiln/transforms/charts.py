"""Charts of a memkiln database, as Altair (Vega-Lite) specifications. Pure: frames in,
charts out; the notebook shows them, ``memkiln report`` embeds them in one HTML file.
"""

from __future__ import annotations

import altair as alt
import polars as pl

WIDTH = 560
HEIGHT = 220


def _empty(title: str) -> alt.Chart:
    """A chart that says there is nothing to draw (Vega-Lite still renders it)."""
    return (
        alt.Chart(pl.DataFrame({"text": ["no data yet"]}), title=title)
        .mark_text(size=14)
        .encode(text="text:N")
        .properties(width=WIDTH, height=60)
    )


def sessions_per_day(sessions_daily: pl.DataFrame) -> alt.Chart:
    """Sessions started per day, stacked by project."""
    title = "Sessions per day, by project"
    if sessions_daily.is_empty():
        return _empty(title)
    data = sessions_daily.group_by("day", "project_key").agg(pl.col("sessions").sum())
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            x=alt.X("day:T", title="day (UTC)"),
            y=alt.Y("sessions:Q", title="sessions"),
            color=alt.Color(
                "project_key:N",
                title="project",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=360),
            ),
            tooltip=["day:T", "project_key:N", "sessions:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def tool_calls_by_project(tool_failures: pl.DataFrame) -> alt.Chart:
    """Tool calls per project, failed and ok."""
    title = "Tool calls per project: ok and failed"
    if tool_failures.is_empty():
        return _empty(title)
    data = (
        tool_failures.group_by("project_key")
        .agg(ok=(pl.col("calls") - pl.col("failed")).sum(), failed=pl.col("failed").sum())
        .unpivot(index="project_key", variable_name="outcome", value_name="calls")
    )
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            y=alt.Y("project_key:N", title=None, sort="-x"),
            x=alt.X("calls:Q", title="tool calls"),
            color=alt.Color(
                "outcome:N",
                scale=alt.Scale(domain=["ok", "failed"], range=["#4c78a8", "#e45756"]),
            ),
            tooltip=["project_key:N", "outcome:N", "calls:Q"],
        )
        .properties(width=WIDTH - 160, height=alt.Step(22))
    )


def failures_by_reason(failures: pl.DataFrame) -> alt.Chart:
    """Failures per stage and reason."""
    title = "What failed, by stage and reason"
    if failures.is_empty():
        return _empty(title)
    data = failures.with_columns(what=pl.concat_str(["stage", "reason"], separator=": ")).head(25)
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            y=alt.Y("what:N", title=None, sort="-x"),
            x=alt.X("failures:Q", title="failures"),
            color=alt.Color("stage:N", title="stage"),
            tooltip=["stage:N", "reason:N", "failures:Q", "example:N"],
        )
        .properties(width=WIDTH - 160, height=alt.Step(18))
    )


def cost_per_day(costs: pl.DataFrame) -> alt.Chart:
    """Model tokens per day and model (cost in the tooltip)."""
    title = "Model tokens per day, by phase and model"
    if costs.is_empty():
        return _empty(title)
    data = costs.with_columns(
        tokens=pl.col("input_tokens") + pl.col("output_tokens"),
        what=pl.concat_str(["phase", "model"], separator=" · "),
    )
    return (
        alt.Chart(data, title=title)
        .mark_bar()
        .encode(
            x=alt.X("day:T", title="day (UTC)"),
            y=alt.Y("tokens:Q", title="tokens (in + out)"),
            color=alt.Color(
                "what:N",
                title="phase · model",
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=360),
            ),
            tooltip=["day:T", "what:N", "requests:Q", "tokens:Q", "cost_usd:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def all_charts(
    *,
    sessions_daily: pl.DataFrame,
    tool_failures: pl.DataFrame,
    failures: pl.DataFrame,
    costs: pl.DataFrame,
) -> dict[str, alt.Chart]:
    """Every chart of the report, by name (the name is the element id in the HTML)."""
    return {
        "sessions": sessions_per_day(sessions_daily),
        "failures": failures_by_reason(failures),
        "tool_calls": tool_calls_by_project(tool_failures),
        "costs": cost_per_day(costs),
    }
