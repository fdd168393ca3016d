"""Stage-one job state in DuckDB: claim (lease), finish with an outcome, take over orphans.

Only one process can hold the DuckDB file, so when a run starts, every job still marked
``running`` by another run belongs to a run that died: ``release_orphans`` returns them to
``pending`` at once (their lease is not waited out) and marks that run ``abandoned``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import duckdb
import polars as pl

from memkiln.errors import StoreError
from memkiln.io.store import execute, fetch_pl, now, sql, transaction
from memkiln.transforms.redact import RuleSet, redact_expr
from memkiln.transforms.selection import JOB_COLUMNS, ROLLOUT_COLUMNS
from memkiln.transforms.states import (
    RETRY_NOW_REASONS,
    TRANSIENT_REASONS,
    UNCHARGED_REASONS,
    Finished,
)


def release_orphans(con: duckdb.DuckDBPyConnection, *, run_id: str) -> int:
    """Return jobs held by runs that are gone to ``pending``; returns how many. Jobs held by
    a batch of the Batch API (owner ``batch:…``) stay with it until it is applied."""
    orphans = execute(con, "orphan_jobs_count", run_id=run_id).fetchall()[0][0]
    if orphans:
        execute(con, "abandon_orphan_runs", run_id=run_id, at=now())
        execute(con, "release_orphan_jobs", run_id=run_id, at=now())
    return int(orphans)


def release_unsent(con: duckdb.DuckDBPyConnection, *, run_id: str) -> int:
    """Return this run's claimed jobs that were never sent (a run stopped early) to
    ``pending``; returns how many."""
    return len(execute(con, "release_unsent_jobs", run_id=run_id, at=now()).fetchall())


def load_selection_inputs(con: duckdb.DuckDBPyConnection) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rollouts and jobs tables, narrowed to what candidate selection reads."""
    rollouts = fetch_pl(con, sql("selection_rollouts")).select(list(ROLLOUT_COLUMNS))
    rollouts = rollouts.cast(ROLLOUT_COLUMNS)
    jobs = fetch_pl(con, sql("selection_jobs")).select(list(JOB_COLUMNS)).cast(JOB_COLUMNS)
    return rollouts, jobs


def claim_many(
    con: duckdb.DuckDBPyConnection,
    todo: pl.DataFrame,
    *,
    run_id: str,
    lease_seconds: int,
) -> dict[str, int]:
    """Mark the jobs of ``todo`` (``rollout_id, updated_at``) running under this run's lease,
    in one transaction; returns the attempt number each job's next attempt will have.

    A claim charges nothing: ``attempts`` only grows when an outcome is written
    (``finish_many``), so jobs claimed by a run that dies before sending them keep their
    retry budget. A new version of a session (a different watermark), or a session done
    before and taken again (its output was made by another backend, model or prompt),
    starts its retry budget again.
    """
    at = now()
    frame = todo.select("rollout_id", watermark="updated_at")
    with transaction(con, claim_batch=frame):
        lease = at + timedelta(seconds=lease_seconds)
        execute(con, "claim_jobs", run_id=run_id, lease=lease, at=at)
        rows = execute(con, "claimed_attempts").fetchall()
    return {rid: int(n) + 1 for rid, n in rows}


def reusable_outputs(
    con: duckdb.DuckDBPyConnection, *, prompt_version: str, model: str
) -> set[tuple[str, str]]:
    """``(rollout_id, input_hash)`` pairs already extracted with this prompt and model."""
    rows = execute(con, "reusable_outputs", pv=prompt_version, model=model).fetchall()
    return {(rid, h) for rid, h in rows}


OUTCOME_SCHEMA = pl.Schema(
    {
        "rollout_id": pl.String(),
        "outcome": pl.String(),
        "reason": pl.String(),
        "detail": pl.String(),
        "raw_memory": pl.String(),
        "rollout_summary": pl.String(),
        "rollout_slug": pl.String(),
        "watermark": pl.Datetime("us", "UTC"),
        "attempt": pl.Int32(),
        "input_hash": pl.String(),
        "input_tokens": pl.Int64(),
        "output_tokens": pl.Int64(),
        "cost_usd": pl.Float64(),
        "started_at": pl.Datetime("us", "UTC"),
    }
)


def finish_many(
    con: duckdb.DuckDBPyConnection,
    done: list[Finished],
    *,
    run_id: str,
    backend: str,
    model: str,
    prompt_version: str,
    retry_delay: timedelta,
    rules: RuleSet,
    also: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> None:
    """Record outcomes, job states and outputs of several attempts in one transaction
    (with ``also``'s statements, when given: what must be written with them or not at all).

    Every text (the model's answer, failure details) is redacted again here, in one
    vectorized pass, before it is written.

    ``succeeded`` replaces the session's output; ``succeeded_no_output`` removes it;
    ``reused`` keeps it and moves its watermark; ``failed`` schedules a retry: at once for a
    failure of the service (``RETRY_NOW_REASONS``), after ``retry_delay`` for the others.

    Each outcome but ``reused`` uses one attempt of the session's retry budget, except a
    failure of the whole run rather than of the session (``UNCHARGED_REASONS``: the endpoint
    is unreachable, the key is refused, the model does not exist).
    """
    if not done:
        if also is not None:
            also(con)
        return
    at = now()
    frame = pl.DataFrame(
        [
            {
                "rollout_id": f.result.rollout_id,
                "outcome": f.result.outcome,
                "reason": f.result.reason,
                "detail": f.result.detail,
                "raw_memory": f.result.output.raw_memory if f.result.output else None,
                "rollout_summary": f.result.output.rollout_summary if f.result.output else None,
                "rollout_slug": f.result.output.rollout_slug if f.result.output else None,
                "watermark": f.watermark,
                "attempt": f.attempt,
                "input_hash": f.result.input_hash,
                "input_tokens": f.result.input_tokens,
                "output_tokens": f.result.output_tokens,
                "cost_usd": f.result.cost_usd,
                "started_at": f.result.started_at or at,
            }
            for f in done
        ],
        schema=OUTCOME_SCHEMA,
    ).with_columns(
        redact_expr(pl.col(c), rules=rules)
        for c in ("raw_memory", "rollout_summary", "rollout_slug", "detail")
    )
    made_by = {"run_id": run_id, "backend": backend, "model": model, "at": at}
    with transaction(con, finished=frame):
        execute(con, "finish_outputs_delete")
        execute(con, "finish_outputs_insert", **made_by, pv=prompt_version)
        execute(con, "finish_outputs_reuse")
        execute(
            con,
            "finish_jobs",
            at=at,
            retry_at=at + retry_delay,
            uncharged=list(UNCHARGED_REASONS),
            retry_now=list(RETRY_NOW_REASONS),
        )
        execute(con, "finish_attempts", **made_by)
        if also is not None:
            also(con)


def uncharge(con: duckdb.DuckDBPyConnection, rollout_ids: list[str]) -> int:
    """Give back the attempt that transient failures (``TRANSIENT_REASONS``) used, for
    sessions that failed while the whole service was failing (the run stopped on a streak of
    such failures); returns how many jobs got it back."""
    if not rollout_ids:
        return 0
    rows = con.execute(
        sql("uncharge_jobs"),
        {"ids": rollout_ids, "transient": list(TRANSIENT_REASONS), "at": now()},
    ).fetchall()
    return len(rows)


def store_write_error(db: object, exc: Exception) -> StoreError:
    """One clear line for a database that could not be written part-way through a run (a
    full disk, a lost mount): DuckDB's own exception says neither which file nor what to do.
    """
    first = " ".join(str(exc).split())[:300]
    return StoreError(
        f"the database {db} could not be written ({type(exc).__name__}: {first}); "
        "free disk space or check the file system, then run again: work done so far is kept"
    )


def record_decisions(con: duckdb.DuckDBPyConnection, decided: pl.DataFrame, *, run_id: str) -> None:
    """Store every session's selection decision of this run (``decided``: ``rollout_id,
    decision``), replacing the previous ones, and this run's counts per reason."""
    frame = decided.select("rollout_id", "decision")
    with transaction(con, decided=frame):
        con.execute(sql("record_decisions"), {"run_id": run_id, "at": now()})
        con.execute(sql("record_selection_counts"))


def selection_reasons(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, int]]:
    """``(decision, reason, sessions)`` of the latest selection, most frequent first: what
    ``memkiln status`` shows as the count of sessions per reason."""
    rows = con.execute(sql("selection_reasons")).fetchall()
    return [(str(d), str(r), int(n)) for d, r, n in rows]
