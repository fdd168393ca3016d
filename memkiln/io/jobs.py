"""Stage-one job state in DuckDB: claim (lease), finish with an outcome, take over orphans.

Only one process can hold the DuckDB file, so when a run starts, every job still marked
``running`` by another run belongs to a run that died: ``release_orphans`` returns them to
``pending`` at once (their lease is not waited out) and marks that run ``abandoned``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import polars as pl

from memkiln.io.store import fetch_pl, now
from memkiln.transforms.outputs import StageOneOutput
from memkiln.transforms.selection import JOB_COLUMNS, ROLLOUT_COLUMNS


@dataclass(frozen=True)
class Outcome:
    """How one stage-one attempt ended."""

    rollout_id: str
    outcome: str  # succeeded | succeeded_no_output | failed | reused
    reason: str | None = None
    detail: str | None = None
    output: StageOneOutput | None = None
    input_hash: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    started_at: datetime | None = None


def release_orphans(con: duckdb.DuckDBPyConnection, *, run_id: str) -> int:
    """Return jobs held by runs that are gone to ``pending``; returns how many."""
    orphans = con.execute(
        "select count(*) from stage1_jobs where status = 'running' and owner <> $run_id",
        {"run_id": run_id},
    ).fetchall()[0][0]
    if orphans:
        con.execute(
            "update runs set status = 'abandoned', ended_at = coalesce(ended_at, $at) "
            "where status = 'running' and run_id <> $run_id and run_id in "
            "(select owner from stage1_jobs where status = 'running')",
            {"run_id": run_id, "at": now()},
        )
        con.execute(
            "update stage1_jobs set status = 'pending', owner = null, lease_until = null, "
            "updated_at = $at where status = 'running' and owner <> $run_id",
            {"run_id": run_id, "at": now()},
        )
    return int(orphans)


def load_selection_inputs(con: duckdb.DuckDBPyConnection) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rollouts and jobs tables, narrowed to what candidate selection reads."""
    rollouts = fetch_pl(con, f"select {', '.join(ROLLOUT_COLUMNS)} from rollouts").cast(
        ROLLOUT_COLUMNS  # type: ignore[arg-type]
    )
    jobs = fetch_pl(con, f"select {', '.join(JOB_COLUMNS)} from stage1_jobs").cast(
        JOB_COLUMNS  # type: ignore[arg-type]
    )
    return rollouts, jobs


def claim(
    con: duckdb.DuckDBPyConnection,
    rollout_id: str,
    *,
    watermark: datetime | None,
    run_id: str,
    lease_seconds: int,
) -> int:
    """Mark a job running under this run's lease; returns its attempt number for this version.

    A new version of the session (a different watermark) starts its retry budget again.
    """
    at = now()
    con.execute(
        """
        insert into stage1_jobs as j (rollout_id, status, owner, lease_until, attempts,
                                      source_watermark, updated_at)
        values ($rid, 'running', $run_id, $lease, 1, $wm, $at)
        on conflict (rollout_id) do update set
            status = 'running',
            owner = excluded.owner,
            lease_until = excluded.lease_until,
            attempts = case
                when j.source_watermark is not distinct from excluded.source_watermark
                    then j.attempts + 1
                else 1
            end,
            source_watermark = excluded.source_watermark,
            updated_at = excluded.updated_at
        """,
        {
            "rid": rollout_id,
            "run_id": run_id,
            "lease": at + timedelta(seconds=lease_seconds),
            "wm": watermark,
            "at": at,
        },
    )
    return int(
        con.execute(
            "select attempts from stage1_jobs where rollout_id = $rid", {"rid": rollout_id}
        ).fetchall()[0][0]
    )


def reusable_output(
    con: duckdb.DuckDBPyConnection,
    rollout_id: str,
    *,
    input_hash: str,
    prompt_version: str,
    model: str,
) -> bool:
    """Whether this exact input was already extracted with this prompt and model."""
    rows = con.execute(
        "select 1 from stage1_outputs where rollout_id = $rid and input_hash = $h "
        "and prompt_version = $pv and model = $m",
        {"rid": rollout_id, "h": input_hash, "pv": prompt_version, "m": model},
    ).fetchall()
    return bool(rows)


def finish(
    con: duckdb.DuckDBPyConnection,
    result: Outcome,
    *,
    watermark: datetime | None,
    attempt: int,
    run_id: str,
    backend: str,
    model: str,
    prompt_version: str,
    retry_delay: timedelta,
) -> None:
    """Record an attempt's outcome, its job state and (for a success) the output, atomically.

    ``succeeded_no_output`` removes any earlier output of the session.
    """
    at = now()
    params = {"rid": result.rollout_id, "run_id": run_id, "at": at, "wm": watermark}
    con.execute("begin transaction")
    try:
        if result.outcome == "succeeded" and result.output is not None:
            con.execute(
                "delete from stage1_outputs where rollout_id = $rid", {"rid": result.rollout_id}
            )
            con.execute(
                """
                insert into stage1_outputs (rollout_id, raw_memory, rollout_summary, rollout_slug,
                    watermark, backend, model, prompt_version, input_hash, input_tokens,
                    output_tokens, cost_usd, run_id, created_at)
                values ($rid, $raw, $summary, $slug, $wm, $backend, $model, $pv, $hash, $itok,
                        $otok, $cost, $run_id, $at)
                """,
                {
                    **params,
                    "raw": result.output.raw_memory,
                    "summary": result.output.rollout_summary,
                    "slug": result.output.rollout_slug,
                    "backend": backend,
                    "model": model,
                    "pv": prompt_version,
                    "hash": result.input_hash,
                    "itok": result.input_tokens,
                    "otok": result.output_tokens,
                    "cost": result.cost_usd,
                },
            )
        elif result.outcome == "succeeded_no_output":
            con.execute(
                "delete from stage1_outputs where rollout_id = $rid", {"rid": result.rollout_id}
            )
        elif result.outcome == "reused":
            con.execute(
                "update stage1_outputs set watermark = $wm where rollout_id = $rid",
                {"rid": result.rollout_id, "wm": watermark},
            )
        if result.outcome == "failed":
            con.execute(
                "update stage1_jobs set status = 'failed', owner = null, lease_until = null, "
                "retry_at = $retry_at, last_reason = $reason, last_error = $detail, "
                "updated_at = $at where rollout_id = $rid",
                {
                    "rid": result.rollout_id,
                    "at": at,
                    "retry_at": at + retry_delay,
                    "reason": result.reason,
                    "detail": result.detail,
                },
            )
        else:
            status = (
                "succeeded_no_output" if result.outcome == "succeeded_no_output" else "succeeded"
            )
            con.execute(
                "update stage1_jobs set status = $status, owner = null, lease_until = null, "
                "retry_at = null, done_watermark = $wm, last_reason = null, last_error = null, "
                "updated_at = $at where rollout_id = $rid",
                {"rid": result.rollout_id, "at": at, "wm": watermark, "status": status},
            )
        con.execute(
            """
            insert into stage1_attempts (run_id, rollout_id, attempt, outcome, reason, detail,
                backend, model, input_tokens, output_tokens, cost_usd, started_at, ended_at)
            values ($run_id, $rid, $attempt, $outcome, $reason, $detail, $backend, $model,
                    $itok, $otok, $cost, $started, $at)
            """,
            {
                "run_id": run_id,
                "rid": result.rollout_id,
                "attempt": attempt,
                "outcome": result.outcome,
                "reason": result.reason,
                "detail": result.detail,
                "backend": backend,
                "model": model,
                "itok": result.input_tokens,
                "otok": result.output_tokens,
                "cost": result.cost_usd,
                "started": result.started_at or at,
                "at": at,
            },
        )
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
