"""Candidate selection, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): where a session comes
from, attempts on a new version, outputs of unknown origin, and the limits' exact edges."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from memkiln.transforms.selection import (
    JOB_COLUMNS,
    ROLLOUT_COLUMNS,
    SelectionPolicy,
    run_wide_failure_limit,
    select_candidates,
    source_class,
)
from tests.transforms.test_selection import NOW, decide, job, rollout


@pytest.mark.parametrize(
    ("fmt", "source", "originator", "expected"),
    [
        ("codex", "exec", "codex_exec", "exec"),
        ("codex", "VSCode", "codex-tui", "vscode"),  # a source is lower-cased
        ("codex", None, "Codex_VSCode", "vscode"),  # older files: the originator says
        ("codex", None, "codex-tui", "cli"),
        ("codex", None, None, "cli"),
        ("claude", "claude-vscode", None, "vscode"),
        ("claude", "SDK-ts", None, "exec"),
        ("claude", "cli", None, "cli"),
        ("claude", None, None, "cli"),
        ("pi", "whatever", None, "cli"),
    ],
)
def test_each_formats_source_maps_onto_codexs_names(
    fmt: str, source: str | None, originator: str | None, expected: str
) -> None:
    frame = pl.DataFrame(
        {"format": [fmt], "source": [source], "originator": [originator]},
        schema={"format": pl.String, "source": pl.String, "originator": pl.String},
    )
    got = frame.select(
        source_class(
            source=pl.col("source"), originator=pl.col("originator"), format=pl.col("format")
        )
    ).item()
    assert got == expected


def test_only_vscode_sessions_when_only_vscode_is_selected() -> None:
    got = decide(
        [
            rollout("tui", source=None, originator="codex-tui"),
            rollout("ide", source=None, originator="Codex_VSCode"),
            rollout("claude-ide", format="claude", source="claude-vscode"),
            rollout("claude-cli", format="claude", source="cli"),
        ],
        sources=("vscode",),
    )
    assert got == {
        "tui": "source_not_selected",
        "ide": "take",
        "claude-ide": "take",
        "claude-cli": "source_not_selected",
    }


def _attempts(rows: list[dict], jobs: list[dict], **policy: object) -> dict[str, int]:
    out = select_candidates(
        pl.DataFrame(rows, schema=ROLLOUT_COLUMNS).lazy(),
        pl.DataFrame(jobs, schema=JOB_COLUMNS).lazy(),
        now=NOW,
        policy=SelectionPolicy(**policy),  # type: ignore[arg-type]
    ).collect()
    return dict(out.select("rollout_id", "attempts_so_far").iter_rows())


def test_attempts_count_only_on_the_same_version_of_a_session() -> None:
    rows = [rollout("fresh"), rollout("same"), rollout("newer")]
    same_wm = rows[1]["updated_at"]
    old_wm = rows[2]["updated_at"] - timedelta(hours=3)  # type: ignore[operator]
    jobs = [
        job("same", "failed", watermark=same_wm, attempts=2),
        job("newer", "failed", watermark=old_wm, attempts=2),
    ]
    assert _attempts(rows, jobs) == {"fresh": 0, "same": 2, "newer": 0}


def test_a_new_version_gets_a_full_retry_budget_even_a_budget_of_one() -> None:
    r = rollout("a")
    old = job("a", "failed", watermark=r["updated_at"] - timedelta(hours=2), attempts=5)  # type: ignore[operator]
    assert decide([r], [old], retry_budget=1) == {"a": "take"}
    assert decide([r], [], retry_budget=1) == {"a": "take"}


def test_an_output_whose_maker_is_unknown_is_redone_for_a_named_producer() -> None:
    r = rollout("a")
    wm = r["updated_at"]
    unknown = job("a", "succeeded", watermark=wm, done_watermark=wm)  # output_* are null
    assert decide([r], [unknown], producer=("heuristic", "heuristic-v1", "stage1-v1")) == {
        "a": "take"
    }
    assert decide([r], [unknown]) == {"a": "up_to_date"}


def test_the_age_limit_keeps_a_session_exactly_at_the_limit() -> None:
    assert decide([rollout("edge", hours_ago=24 * 10)]) == {"edge": "take"}
    assert decide([rollout("past", hours_ago=24 * 10 + 0.01)]) == {"past": "too_old"}


def test_a_session_idle_exactly_the_minimum_is_taken() -> None:
    assert decide([rollout("edge", hours_ago=6)]) == {"edge": "take"}
    assert decide([rollout("busy", hours_ago=5.99)]) == {"busy": "still_active"}


def test_a_lease_that_ends_now_is_over() -> None:
    r = rollout("a")
    ends_now = job("a", "running", watermark=r["updated_at"], owner="run-now", lease_until=NOW)
    assert decide([r], [ends_now]) == {"a": "take"}


@pytest.mark.parametrize(("concurrency", "limit"), [(1, 8), (4, 8), (5, 10), (16, 32)])
def test_run_wide_failures_stop_a_run_after_twice_the_concurrency_and_at_least_eight(
    concurrency: int, limit: int
) -> None:
    assert run_wide_failure_limit(concurrency) == limit


def test_a_job_without_recorded_attempts_has_made_none() -> None:
    r = rollout("a")
    j = job("a", "failed", watermark=r["updated_at"], attempts=None)
    assert _attempts([r], [j], retry_budget=1) == {"a": 0}
    assert decide([r], [j], retry_budget=1) == {"a": "take"}


def test_a_retry_due_now_is_taken() -> None:
    r = rollout("a")
    assert decide([r], [job("a", "failed", watermark=r["updated_at"], retry_at=NOW)]) == {
        "a": "take"
    }


def test_undated_sessions_count_as_the_oldest_waiting() -> None:
    rows = [rollout("undated", updated_at=None), rollout("old", hours_ago=30)]
    rows += [rollout("new", hours_ago=7)]
    got = decide(rows, max_rollouts_per_run=2)
    assert got == {"new": "take", "old": "over_run_limit", "undated": "take"}


def test_the_run_limit_prefers_dated_sessions_then_ids_in_order() -> None:
    rows = [rollout("undated", updated_at=None), rollout("b", hours_ago=8)]
    rows += [rollout("a", hours_ago=8)]
    got = decide(rows, max_rollouts_per_run=1)
    assert got == {"a": "take", "b": "over_run_limit", "undated": "over_run_limit"}


def test_selection_returns_the_decision_columns() -> None:
    out = select_candidates(
        pl.DataFrame([rollout("a")], schema=ROLLOUT_COLUMNS).lazy(),
        pl.DataFrame([], schema=JOB_COLUMNS).lazy(),
        now=NOW,
        policy=SelectionPolicy(),
    ).collect()
    assert out.columns == ["rollout_id", "updated_at", "decision", "attempts_so_far"]
    assert out["updated_at"].to_list() == [NOW - timedelta(hours=24)]
