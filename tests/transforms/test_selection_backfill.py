"""Selection never starves: repeated runs reach every eligible session, and a backfill's
date range keeps the sessions whose own dates fall in it."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.selection import (
    JOB_COLUMNS,
    ROLLOUT_COLUMNS,
    SelectionPolicy,
    select_candidates,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def rollout(rid: str, *, hours_ago: float, **kw: object) -> dict[str, object]:
    base = {
        "rollout_id": rid, "format": "codex", "source": "cli", "originator": "codex-tui",
        "is_subagent": False, "memory_mode": None, "n_user_messages": 1,
        "started_at": None, "updated_at": NOW - timedelta(hours=hours_ago),
    }  # fmt: skip
    return base | kw


def one_run(
    rows: list[dict[str, object]], done: dict[str, datetime], policy: SelectionPolicy
) -> list[str]:
    """Select, then mark what was taken as succeeded (as a run whose sessions all succeed)."""
    jobs = pl.DataFrame(
        [
            {"rollout_id": rid, "status": "succeeded", "attempts": 1,
             "source_watermark": wm, "done_watermark": wm}
            for rid, wm in done.items()
        ],
        schema=JOB_COLUMNS,
    )  # fmt: skip
    decided = select_candidates(
        pl.DataFrame(rows, schema=ROLLOUT_COLUMNS).lazy(),
        jobs.lazy(),
        now=NOW,
        policy=policy,
    ).collect()
    assert decided.height == len(rows)  # every session is decided, every run
    taken = decided.filter(pl.col("decision") == "take")
    for rid, updated_at in taken.select("rollout_id", "updated_at").iter_rows():
        done[rid] = updated_at
    return taken["rollout_id"].to_list()


def test_repeated_runs_reach_every_eligible_session_within_ceil_eligible_over_the_limit() -> None:
    rows = [rollout(f"s{i:04d}", hours_ago=7 + i) for i in range(600)]
    rows += [rollout(f"sub{i}", hours_ago=8, is_subagent=True) for i in range(5)]
    policy = SelectionPolicy(max_rollouts_per_run=70, backfill=True)
    done: dict[str, datetime] = {}
    runs = 0
    while one_run(rows, done, policy):
        runs += 1
        assert runs <= 20
    assert len(done) == 600
    assert runs == math.ceil(600 / 70)


def test_old_sessions_are_reached_even_when_more_new_ones_arrive_than_a_run_takes() -> None:
    # 30 new sessions arrive before each run, a run takes 20: newest-first alone would never
    # reach the first 100 sessions
    rows = [rollout(f"old{i:03d}", hours_ago=100 + i) for i in range(100)]
    policy = SelectionPolicy(max_rollouts_per_run=20, backfill=True, min_rollout_idle_hours=0)
    done: dict[str, datetime] = {}
    for night in range(12):  # each night's sessions are newer than the last night's
        rows += [rollout(f"n{night}-{i}", hours_ago=90 - 6 * night - 0.01 * i) for i in range(30)]
        one_run(rows, done, policy)
    assert all(f"old{i:03d}" in done for i in range(100))


def test_the_date_range_keeps_sessions_whose_own_dates_fall_in_it() -> None:
    day = timedelta(days=1)
    rows = [
        rollout("before", hours_ago=0, started_at=NOW - 40 * day, updated_at=NOW - 30 * day),
        rollout("overlaps", hours_ago=0, started_at=NOW - 22 * day, updated_at=NOW - 19 * day),
        rollout("inside", hours_ago=0, started_at=NOW - 15 * day, updated_at=NOW - 15 * day),
        rollout("after", hours_ago=0, started_at=NOW - 5 * day, updated_at=NOW - 5 * day),
        rollout("undated", hours_ago=0, started_at=None, updated_at=None),
    ]
    policy = SelectionPolicy(backfill=True, since=NOW - 20 * day, until=NOW - 10 * day)
    decided = select_candidates(
        pl.DataFrame(rows, schema=ROLLOUT_COLUMNS).lazy(),
        pl.DataFrame([], schema=JOB_COLUMNS).lazy(),
        now=NOW,
        policy=policy,
    ).collect()
    got = dict(decided.select("rollout_id", "decision").iter_rows())
    assert got == {
        "before": "outside_range",
        "overlaps": "take",
        "inside": "take",
        "after": "outside_range",
        "undated": "outside_range",
    }
