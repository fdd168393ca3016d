"""The charts name only their largest entries: a store of sixty projects draws eight by name
and one grey "other projects (52)", never a sixty-colour legend."""

from __future__ import annotations

from datetime import date

import polars as pl
from polars.testing import assert_frame_equal

from memkiln.transforms.charts import (
    EMPTY,
    OTHER_COLOUR,
    TOP_COLOURS,
    TOP_ROWS,
    sessions_per_day,
    tool_calls_by_kind,
    top_n,
)


def test_top_n_keeps_the_largest_and_sums_the_rest_into_one_entry_that_counts_them() -> None:
    frame = pl.DataFrame({"k": ["a", "b", "c", "d", "d"], "w": [5, 1, 3, 1, 1]})
    got = top_n(frame, key="k", weight="w", n=2, other="others")
    assert got["k"].to_list() == ["a", "others (2)", "c", "others (2)", "others (2)"]
    assert_frame_equal(top_n(frame, key="k", weight="w", n=4, other="others"), frame)


def test_sixty_projects_draw_eight_colours_and_one_grey_other() -> None:
    daily = pl.DataFrame(
        {
            "day": [date(2026, 1, 1 + i % 28) for i in range(60)],
            "project_key": [f"github.com/acme/project-{i}" for i in range(60)],
            "sessions": [60 - i for i in range(60)],
        }
    )
    spec = sessions_per_day(daily).to_dict()
    scale = spec["encoding"]["color"]["scale"]
    assert len(scale["domain"]) == TOP_COLOURS + 1
    assert scale["domain"][:2] == ["github.com/acme/project-0", "github.com/acme/project-1"]
    assert scale["domain"][-1] == "other projects (52)" and scale["range"][-1] == OTHER_COLOUR
    assert f"the {TOP_COLOURS} busiest of 60" in spec["title"]


def test_forty_kinds_of_tool_draw_at_most_the_top_rows_and_one_other() -> None:
    tools = pl.DataFrame(
        {"tool_kind": [f"t{i}" for i in range(40)], "calls": [100] * 40, "failed": [1] * 40}
    )
    spec = tool_calls_by_kind(tools).to_dict()
    (rows,) = spec["datasets"].values()
    kinds = {r["tool_kind"] for r in rows}
    assert len(kinds) == TOP_ROWS + 1 and f"other tools ({40 - TOP_ROWS})" in kinds


def test_a_chart_with_nothing_to_draw_says_so() -> None:
    empty = pl.DataFrame(schema={"tool_kind": pl.String, "calls": pl.Int64, "failed": pl.Int64})
    assert tool_calls_by_kind(empty).to_dict()["description"] == EMPTY


def test_the_run_history_axis_reads_each_tick_apart_whatever_the_span() -> None:
    from datetime import timedelta

    from memkiln.transforms.charts import time_format

    assert time_format(timedelta(seconds=40)) == "%H:%M:%S"  # runs within one minute
    assert time_format(timedelta(hours=5)) == "%m-%d %H:%M"
    assert time_format(timedelta(days=30)) == "%Y-%m-%d"


def test_runs_within_a_minute_get_seconds_on_the_axis() -> None:
    from datetime import UTC, datetime, timedelta

    from memkiln.transforms.charts import runs_over_time

    at = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    history = pl.DataFrame(
        {
            "started_at": [at, at + timedelta(seconds=20)],
            "status": ["succeeded", "failed"],
            "dry_run": [False, True],
            "seconds": [1.0, 2.0],
            "command": ["run", "run"],
            "sessions_done": [1, 0],
            "projects_written": [1, 0],
            "model_requests": [0, 0],
            "cost_usd": [0.0, 0.0],
        }
    )
    spec = runs_over_time(history).to_dict()
    assert spec["encoding"]["x"]["axis"]["format"] == "%H:%M:%S"
