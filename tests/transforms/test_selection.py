"""Candidate selection: pure decisions over rollouts and jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.selection import (
    JOB_COLUMNS,
    ROLLOUT_COLUMNS,
    SelectionPolicy,
    select_candidates,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def rollout(rid: str, *, hours_ago: float = 24, **kw: object) -> dict[str, object]:
    base = {
        "rollout_id": rid, "format": "codex", "source": "cli", "originator": "codex-tui",
        "is_subagent": False, "memory_mode": None, "n_user_messages": 2,
        "updated_at": NOW - timedelta(hours=hours_ago),
    }  # fmt: skip
    return base | kw


def job(rid: str, status: str, *, watermark: datetime, **kw: object) -> dict[str, object]:
    base = {
        "rollout_id": rid, "status": status, "owner": None, "lease_until": None, "attempts": 1,
        "source_watermark": watermark, "done_watermark": None, "retry_at": None,
    }  # fmt: skip
    return base | kw


def decide(
    rollouts: list[dict],
    jobs: list[dict] = (),  # type: ignore[assignment]
    producer: tuple[str, str, str] | None = None,
    **policy: object,
) -> dict[str, str]:
    out = select_candidates(
        pl.DataFrame(rollouts, schema=ROLLOUT_COLUMNS).lazy(),
        pl.DataFrame(list(jobs), schema=JOB_COLUMNS).lazy(),
        now=NOW,
        policy=SelectionPolicy(**policy),  # type: ignore[arg-type]
        live_owners=("run-now",),
        producer=producer,
    ).collect()
    return dict(out.select("rollout_id", "decision").iter_rows())


def test_sources_subagents_memory_mode_and_empty_sessions_are_skipped_with_a_reason() -> None:
    got = decide([
        rollout("a"), rollout("b", source="exec"), rollout("c", is_subagent=True),
        rollout("d", memory_mode="disabled"), rollout("e", memory_mode="polluted"),
        rollout("f", n_user_messages=0), rollout("g", source="vscode"),
        rollout("h", source=None, originator="codex_vscode"),
        rollout("i", format="claude", source="claude-vscode"), rollout("j", format="claude", source="sdk-ts"),
    ])  # fmt: skip
    assert got == {
        "a": "take", "b": "source_not_selected", "c": "subagent", "d": "memory_disabled",
        "e": "memory_disabled", "f": "no_user_message", "g": "take", "h": "take", "i": "take",
        "j": "source_not_selected",
    }  # fmt: skip


def test_exec_can_be_added_to_the_sources() -> None:
    assert decide([rollout("b", source="exec")], sources=("cli", "vscode", "exec")) == {"b": "take"}


def test_age_and_idle_limits_and_backfill() -> None:
    rows = [
        rollout("old", hours_ago=24 * 11),
        rollout("fresh", hours_ago=1),
        rollout("ok", hours_ago=7),
    ]
    assert decide(rows) == {"old": "too_old", "fresh": "still_active", "ok": "take"}
    assert decide(rows, backfill=True) == {"old": "take", "fresh": "still_active", "ok": "take"}


def test_up_to_date_when_the_done_watermark_equals_the_sessions_update_time() -> None:
    r = rollout("a")
    wm = r["updated_at"]
    assert decide([r], [job("a", "succeeded", watermark=wm, done_watermark=wm)]) == {
        "a": "up_to_date"
    }
    older = wm - timedelta(hours=1)  # type: ignore[operator]
    assert decide([r], [job("a", "succeeded", watermark=older, done_watermark=older)]) == {
        "a": "take"
    }


def test_an_output_made_by_another_backend_model_or_prompt_is_not_up_to_date() -> None:
    r = rollout("a")
    wm = r["updated_at"]
    made = {"output_backend": "heuristic", "output_model": "heuristic-v1",
            "output_prompt_version": "stage1-v1"}  # fmt: skip
    done = job("a", "succeeded", watermark=wm, done_watermark=wm, **made)
    same = ("heuristic", "heuristic-v1", "stage1-v1")
    assert decide([r], [done], producer=same) == {"a": "up_to_date"}
    for other in [("openai", "gpt-5-mini", "stage1-v1"), ("heuristic", "heuristic-v1", "v2")]:
        assert decide([r], [done], producer=other) == {"a": "take"}
    no_output = job("a", "succeeded_no_output", watermark=wm, done_watermark=wm)
    assert decide([r], [no_output], producer=("openai", "m", "stage1-v1")) == {"a": "up_to_date"}


def test_failures_wait_for_their_retry_time_and_stop_at_the_budget_until_a_new_version() -> None:
    r = rollout("a")
    wm = r["updated_at"]
    later = NOW + timedelta(minutes=30)
    assert decide([r], [job("a", "failed", watermark=wm, retry_at=later)]) == {"a": "retry_later"}
    assert decide([r], [job("a", "failed", watermark=wm, retry_at=NOW - timedelta(minutes=1))]) == {
        "a": "take"
    }
    spent = job("a", "failed", watermark=wm, attempts=3, retry_at=NOW - timedelta(hours=1))
    assert decide([r], [spent]) == {"a": "retry_budget_exhausted"}
    new_version = job("a", "failed", watermark=wm - timedelta(hours=2), attempts=3)  # type: ignore[operator]
    assert decide([r], [new_version]) == {"a": "take"}


def test_a_running_job_is_leased_only_while_its_owner_lives() -> None:
    r = rollout("a")
    lease = NOW + timedelta(minutes=30)
    mine = job("a", "running", watermark=r["updated_at"], owner="run-now", lease_until=lease)
    dead = job("a", "running", watermark=r["updated_at"], owner="run-dead", lease_until=lease)
    assert decide([r], [mine]) == {"a": "leased"}
    assert decide([r], [dead]) == {"a": "take"}


def test_the_run_limit_takes_the_newest_and_the_oldest_waiting_sessions() -> None:
    rows = [rollout(str(i), hours_ago=10 + i) for i in range(5)]
    got = decide(rows, max_rollouts_per_run=3)
    assert got == {
        "0": "take",
        "1": "take",
        "2": "over_run_limit",
        "3": "over_run_limit",
        "4": "take",
    }


def test_every_session_is_decided_however_many_there_are() -> None:
    rows = [rollout(str(i), hours_ago=10 + i) for i in range(50)]
    assert len(decide(rows, max_rollouts_per_run=3)) == 50
