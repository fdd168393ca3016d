"""Model usage in the store: tokens and cost per run, phase and model (spent, or estimated by
a dry run), and what earlier answers of a model used (the estimates' output tokens)."""

from __future__ import annotations

import duckdb

from memkiln.io.prices import PriceBook
from memkiln.io.store import execute, now, sql
from memkiln.transforms.estimate import (
    CONSOLIDATION_MAX_OUTPUT,
    DEFAULT_CONSOLIDATION_OUTPUT_TOKENS,
    Estimate,
    OutputBasis,
    consolidation_input_tokens,
    expected_output_tokens,
)
from memkiln.transforms.prompts import build_consolidation_input


def past_output_mean(
    con: duckdb.DuckDBPyConnection, *, phase: str, model: str, prompt_version: str = ""
) -> float | None:
    """Mean output tokens of the model's earlier answers in ``phase``, if any (stage one:
    under ``prompt_version``)."""
    return past_output(con, phase=phase, model=model, prompt_version=prompt_version)[0]


def past_output(
    con: duckdb.DuckDBPyConnection, *, phase: str, model: str, prompt_version: str = ""
) -> tuple[float | None, int]:
    """Mean output tokens of the model's earlier answers in ``phase`` (stage one: under
    ``prompt_version``), None when there are none; and how many answers that is."""
    if phase == "extract":
        found = execute(con, "past_output_mean_extract", model=model, prompt_version=prompt_version)
    else:
        found = execute(con, "past_output_mean_usage", phase=phase, model=model)
    value, answers = found.fetchall()[0]
    return (None if value is None else float(value)), int(answers or 0)


def record_usage(
    con: duckdb.DuckDBPyConnection,
    *,
    run_id: str,
    kind: str,
    phase: str,
    backend: str,
    model: str,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    cost_usd: float | None,
) -> None:
    """One ``model_usage`` row (``cost_usd`` None: the price is unknown)."""
    con.execute(
        sql("insert_model_usage"),
        {
            "run_id": run_id,
            "kind": kind,
            "phase": phase,
            "backend": backend,
            "model": model,
            "requests": requests,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": cost_usd,
        },
    )


def record_estimate(
    con: duckdb.DuckDBPyConnection,
    *,
    run_id: str,
    estimate: Estimate,
    phases: tuple[str, ...] = ("extract", "consolidate"),
) -> None:
    """A dry run's counts and estimate (``run_estimates``), with one ``model_usage`` row of
    kind ``estimate`` per model for each of ``phases`` (a parent run stores only the phases
    its child runs did not store already)."""
    con.execute(
        sql("insert_run_estimate"),
        {
            "run_id": run_id,
            "found": estimate.sessions_found,
            "eligible": estimate.sessions_eligible,
            "done": estimate.sessions_done,
            "to_do": estimate.sessions_to_do,
            "projects": estimate.projects_to_do,
            "input_tokens": estimate.input_tokens,
            "output_tokens": estimate.output_tokens,
            "cost_usd": estimate.cost_usd,
            "at": now(),
        },
    )
    for (phase, backend, model), (requests, tokens_in, tokens_out, cost) in estimate.usage.items():
        if phase not in phases:
            continue
        record_usage(
            con,
            run_id=run_id,
            kind="estimate",
            phase=phase,
            backend=backend,
            model=model,
            requests=int(requests or 0),
            input_tokens=int(tokens_in or 0),
            output_tokens=int(tokens_out or 0),
            cost_usd=cost,
        )


def consolidation_estimate(
    con: duckdb.DuckDBPyConnection,
    estimate: Estimate,
    *,
    backend: str,
    model: str,
    memory_tokens: int,
    max_memories: int,
    context_window: int | None,
    prices: PriceBook,
) -> Estimate:
    """Add phase 2 to a dry run's estimate: one request per project that gets new memories
    (the sessions the dry run would take), its input the prompt around them plus
    ``memory_tokens`` per new memory; the heuristic backend sends none."""
    rows = con.execute(sql("projects_to_consolidate")).fetchall()
    estimate.projects_to_do = len(rows)
    if backend == "heuristic":
        return estimate
    base = consolidation_input_tokens(
        build_consolidation_input(
            project_key="unknown-project",
            current_memory=None,
            current_summary=None,
            added="",
            removed="",
            summary_files=[],
            context_window=context_window,
        )
    )
    tokens_in = sum(base + min(int(n), max_memories) * memory_tokens for _, n in rows)
    past, answers = past_output(con, phase="consolidate", model=model)
    out_each = expected_output_tokens(
        past, default=DEFAULT_CONSOLIDATION_OUTPUT_TOKENS, limit=CONSOLIDATION_MAX_OUTPUT
    )
    estimate.output_basis["consolidate"] = OutputBasis(
        out_each, past, answers, DEFAULT_CONSOLIDATION_OUTPUT_TOKENS
    )
    tokens_out = len(rows) * out_each
    estimate.add(
        "consolidate",
        backend,
        model,
        requests=len(rows),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=prices.cost(backend, model, tokens_in, tokens_out),
    )
    return estimate
