"""Which sessions stage one takes this run: pure decisions over rollouts and their jobs.

Every session gets a ``decision`` each run: ``take`` or the fixed reason it is skipped
(stored in ``selection_decisions``), so SQL can say why a session has no memory. Every
session is decided, however large the archive: a run takes at most ``max_rollouts_per_run``
sessions, half of them the newest waiting and half the oldest waiting, so neither fresh
sessions nor an old backlog wait for ever, and each run takes sessions the previous runs did
not finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from memkiln.transforms.settle import CLOCK_SKEW, EARLIEST_TIME
from memkiln.transforms.states import DONE_STATUSES, Decision, JobStatus


def run_wide_failure_limit(concurrency: int) -> int:
    """How many such failures in a row stop a run (the rest of its sessions stay pending)."""
    return max(2 * concurrency, 8)


ROLLOUT_COLUMNS = pl.Schema(
    {
        "rollout_id": pl.String(),
        "format": pl.String(),
        "source": pl.String(),
        "originator": pl.String(),
        "is_subagent": pl.Boolean(),
        "memory_mode": pl.String(),
        "n_user_messages": pl.Int64(),
        "started_at": pl.Datetime("us", "UTC"),
        "updated_at": pl.Datetime("us", "UTC"),
    }
)
JOB_COLUMNS = pl.Schema(
    {
        "rollout_id": pl.String(),
        "status": pl.String(),
        "owner": pl.String(),
        "lease_until": pl.Datetime("us", "UTC"),
        "attempts": pl.Int32(),
        "source_watermark": pl.Datetime("us", "UTC"),
        "done_watermark": pl.Datetime("us", "UTC"),
        "retry_at": pl.Datetime("us", "UTC"),
        # what made the session's stored output (null when it has none)
        "output_backend": pl.String(),
        "output_model": pl.String(),
        "output_prompt_version": pl.String(),
    }
)


@dataclass(frozen=True)
class SelectionPolicy:
    """The knobs of candidate selection (built from Settings)."""

    sources: tuple[str, ...] = ("cli", "vscode")
    max_rollout_age_days: float = 10
    min_rollout_idle_hours: float = 6
    max_rollouts_per_run: int = 1000
    retry_budget: int = 3
    backfill: bool = False
    #: only sessions whose own dates fall in [since, until) (a backfill's range); None: open
    since: datetime | None = None
    until: datetime | None = None


def source_class(*, source: pl.Expr, originator: pl.Expr, format: pl.Expr) -> pl.Expr:
    """Map each format's notion of where a session came from onto Codex's source names.

    Codex files older than the ``source`` field were interactive: ``vscode`` when the
    originator says so, else ``cli``. Claude Code's entrypoint ``cli`` / ``*vscode*`` /
    ``sdk-*`` maps to ``cli`` / ``vscode`` / ``exec``; Pi sessions are ``cli``.
    """
    src = source.str.to_lowercase()
    codex = (
        pl.when(source.is_not_null())
        .then(src)
        .when(originator.str.to_lowercase().str.contains("vscode"))
        .then(pl.lit("vscode"))
        .otherwise(pl.lit("cli"))
    )
    claude = (
        pl.when(src.str.contains("vscode"))
        .then(pl.lit("vscode"))
        .when(src.str.starts_with("sdk"))
        .then(pl.lit("exec"))
        .otherwise(pl.lit("cli"))
    )
    return (
        pl.when(format == "codex")
        .then(codex)
        .when(format == "claude")
        .then(claude)
        .otherwise(pl.lit("cli"))
    )


def select_candidates(
    rollouts: pl.LazyFrame,
    jobs: pl.LazyFrame,
    *,
    now: datetime,
    policy: SelectionPolicy,
    live_owners: tuple[str, ...] = (),
    producer: tuple[str, str, str] | None = None,
) -> pl.LazyFrame:
    """Decide, for every session, whether this run extracts it.

    ``jobs`` holds the current stage-one jobs. A running job whose owner is not in
    ``live_owners`` belongs to a run that died: it is taken over at once, lease or not.
    ``producer`` is this run's ``(backend, model, prompt_version)``: a stored output made by
    another one is not up to date (a ``succeeded_no_output`` session, which has no output,
    is). Returns ``rollout_id, updated_at, decision, attempts_so_far`` (``attempts_so_far`` counts
    attempts on this version of the session; a newer version starts again at 0), newest
    first.

    At most ``max_rollouts_per_run`` sessions are taken: the newest half (rounded up) and the
    oldest half of those waiting; the rest are ``over_run_limit``. Sessions already done are
    ``up_to_date`` and never count against the limit, so repeated runs reach every eligible
    session within ceil(eligible / max_rollouts_per_run) runs, and new sessions arriving
    faster than the limit cannot starve old ones.

    ``since``/``until`` keep the sessions whose dates fall in the range: one that started
    before ``until`` and was last updated at or after ``since`` (its start when it has no
    update time).
    """
    age_limit = now - timedelta(days=policy.max_rollout_age_days)
    idle_limit = now - timedelta(hours=policy.min_rollout_idle_hours)
    same_version = pl.col("source_watermark") == pl.col("updated_at")
    attempts = pl.when(same_version).then(pl.col("attempts")).otherwise(0).fill_null(0)
    memory_off = (
        pl.col("memory_mode").str.to_lowercase().is_in(["disabled", "polluted"]).fill_null(False)
    )
    same_producer = (
        pl.lit(True)
        if producer is None
        else (pl.col("status") == JobStatus.SUCCEEDED_NO_OUTPUT)
        | (
            (pl.col("output_backend") == producer[0])
            & (pl.col("output_model") == producer[1])
            & (pl.col("output_prompt_version") == producer[2])
        ).fill_null(False)
    )
    # a known time outside those ingest accepts (an undated session is judged by its id)
    bad_time = ~pl.col("updated_at").is_between(EARLIEST_TIME, now + CLOCK_SKEW).fill_null(
        True
    ) | ~pl.col("started_at").is_between(EARLIEST_TIME, now + CLOCK_SKEW).fill_null(True)
    decision = (
        pl.when(bad_time)
        .then(pl.lit(Decision.BAD_TIMESTAMP))
        .when(pl.col("is_subagent"))
        .then(pl.lit(Decision.SUBAGENT))
        .when(
            ~source_class(
                source=pl.col("source"), originator=pl.col("originator"), format=pl.col("format")
            ).is_in(list(policy.sources))
        )
        .then(pl.lit(Decision.SOURCE_NOT_SELECTED))
        .when(memory_off)
        .then(pl.lit(Decision.MEMORY_DISABLED))
        .when(pl.col("n_user_messages") == 0)
        .then(pl.lit(Decision.NO_USER_MESSAGE))
        .when(pl.lit(not policy.backfill) & (pl.col("updated_at") < age_limit))
        .then(pl.lit(Decision.TOO_OLD))
        .when(~in_range(policy.since, policy.until))
        .then(pl.lit(Decision.OUTSIDE_RANGE))
        .when(pl.col("updated_at") > idle_limit)
        .then(pl.lit(Decision.STILL_ACTIVE))
        .when(
            pl.col("status").is_in(DONE_STATUSES)
            & (pl.col("done_watermark") == pl.col("updated_at"))
            & same_producer
        )
        .then(pl.lit(Decision.UP_TO_DATE))
        .when(
            (pl.col("status") == JobStatus.RUNNING)
            & pl.col("owner").is_in(list(live_owners))
            & (pl.col("lease_until") > now)
        )
        .then(pl.lit(Decision.LEASED))
        .when((pl.col("status") == JobStatus.FAILED) & (attempts >= policy.retry_budget))
        .then(pl.lit(Decision.RETRY_BUDGET_EXHAUSTED))
        .when((pl.col("status") == JobStatus.FAILED) & same_version & (pl.col("retry_at") > now))
        .then(pl.lit(Decision.RETRY_LATER))
        .otherwise(pl.lit(Decision.TAKE))
    )
    decided = (
        rollouts.join(jobs, on="rollout_id", how="left")
        .with_columns(decision=decision, attempts_so_far=attempts.cast(pl.Int32))
        .sort(["updated_at", "rollout_id"], descending=[True, False], nulls_last=True)
    )
    # rank of each session to take, from the newest and from the oldest
    newest = pl.int_range(pl.len()).over("decision")
    oldest = pl.len().over("decision") - 1 - newest
    cap = policy.max_rollouts_per_run
    taken = (newest < (cap + 1) // 2) | (oldest < cap // 2)
    return decided.with_columns(
        decision=pl.when((pl.col("decision") == Decision.TAKE) & ~taken)
        .then(pl.lit(Decision.OVER_RUN_LIMIT))
        .otherwise(pl.col("decision"))
    ).select("rollout_id", "updated_at", "decision", "attempts_so_far")


def in_range(since: datetime | None, until: datetime | None) -> pl.Expr:
    """Sessions whose own dates fall in ``[since, until)``: started before ``until`` and last
    updated at or after ``since``; an undated session is in an open range only."""
    last = pl.coalesce("updated_at", "started_at")
    first = pl.coalesce("started_at", "updated_at")
    keep = pl.lit(True)
    if since is not None:
        keep = keep & (last >= since).fill_null(False)
    if until is not None:
        keep = keep & (first < until).fill_null(False)
    return keep
