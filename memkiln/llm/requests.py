"""The stage-one request, built one way for every caller: extraction builds the requests of
the sessions it takes from the store (``build_requests``), ``memkiln render-input`` shows
one rollout file's (``stage_one_input_for_file``); both go through
``memkiln.transforms.render.stage_one_inputs``, so what is shown is what is sent."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

from memkiln.errors import InputError
from memkiln.io.archive import FileStat, read_file, shown_path
from memkiln.io.loader import looks_binary, normalize_lines
from memkiln.io.render_large import large_file_input
from memkiln.io.segments import store_segments
from memkiln.io.session_items import read_kept_items, window_chars
from memkiln.io.store import fetch_pl, sql
from memkiln.llm.backends import Request
from memkiln.settings import Settings
from memkiln.transforms.chunks import turn_starts
from memkiln.transforms.estimate import request_input_tokens
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.lines import split_lines
from memkiln.transforms.prompts import (
    STAGE_ONE_MAX_OUTPUT_TOKENS,
    STAGE_ONE_MERGE_VERSION,
    StageOneInput,
)
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.render import NO_PARTS, stage_one_chunks, stage_one_inputs
from memkiln.transforms.segments import segment_items
from memkiln.transforms.settle import settle_times


def stage_one_input(
    items: pl.DataFrame,
    *,
    rollout_id: str,
    rollout_path: str,
    rollout_cwd: str | None,
    context_window: int | None,
    max_output_tokens: int = STAGE_ONE_MAX_OUTPUT_TOKENS,
    rules: RuleSet,
) -> StageOneInput:
    """Filter, render (redacted again) and budget one rollout's items into its messages,
    with extraction's own builder (``stage_one_inputs``)."""
    session = pl.DataFrame(
        {"rollout_id": [rollout_id], "path": [rollout_path], "cwd": [rollout_cwd]},
        schema={"rollout_id": pl.String, "path": pl.String, "cwd": pl.String},
    )
    ((_, built),) = stage_one_inputs(
        session,
        filter_memory_items(items.lazy()),
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        rules=rules,
    )
    return built


def stage_one_input_for_file(
    path: Path,
    *,
    context_window: int | None,
    max_output_tokens: int = STAGE_ONE_MAX_OUTPUT_TOKENS,
    rules: RuleSet,
) -> tuple[StageOneInput, dict[str, object]]:
    """The stage-one input for one rollout file of any format, without touching the store.

    Returns the input and facts for the user (format, rollout id, quarantined lines).
    """
    if not path.is_file():
        raise InputError(f"{shown_path(str(path))} is not a file")
    st = os.stat(path)
    stat = FileStat(str(path.resolve()), st.st_size, st.st_mtime_ns)
    fb = read_file(stat)
    if fb.error == "file_too_large":  # read in pieces, as ingest reads it (io.render_large)
        del fb
        return large_file_input(
            path,
            stat,
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            rules=rules,
        )
    if not fb.data:
        raise InputError(f"{shown_path(str(path))}: {fb.detail or 'the file is empty'}")
    if looks_binary(fb.data):
        raise InputError(f"{shown_path(str(path))} is a binary file, not a rollout")
    read_error = fb.error
    lines = split_lines([(1, fb.data)])
    del fb  # the file's bytes are let go once split (a large file is not held twice)
    with duckdb.connect(":memory:") as con:
        norm = normalize_lines(
            con,
            lines,
            files=pl.DataFrame({"fid": [1], "path": [shown_path(str(path))]}),
            rules=rules,
        )
    del lines
    if norm.rollouts.is_empty():
        raise InputError(
            f"{shown_path(str(path))} holds no Codex, Claude Code or Pi session that memkiln "
            "recognizes"
        )
    # what ingest quarantines (``bad_timestamp``) is never extracted: said in one line
    _, said, timeless = settle_times(norm.rollouts, norm.quarantine.clear(), now=datetime.now(UTC))
    if timeless.height:
        raise InputError(f"{shown_path(str(path))}: {said['detail'][0]}")
    rollout = norm.rollouts.row(0, named=True)
    items = norm.items.with_columns(
        seq=pl.int_range(pl.len(), dtype=pl.Int32), rollout_id=pl.lit(rollout["rollout_id"])
    )
    result = stage_one_input(
        items,
        rollout_id=rollout["rollout_id"],
        # the path ingest stores, as extraction sends it
        rollout_path=shown_path(os.path.abspath(path)),
        rollout_cwd=rollout["cwd"],
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        rules=rules,
    )
    facts: dict[str, object] = {
        "format": rollout["format"],
        "rollout_id": rollout["rollout_id"],
        "quarantined_lines": norm.quarantine.height,
        "read_error": read_error,
    }
    return result, facts


def build_requests(
    con: duckdb.DuckDBPyConnection,
    todo: pl.DataFrame,
    *,
    settings: Settings,
    rules: RuleSet,
    chunked: bool = False,
) -> list[Request]:
    """Requests for the sessions of ``todo``: their kept items, rendered, redacted again and
    budgeted into stage-one messages, all sessions of the chunk in one Polars pass.

    With ``chunked`` (a model backend), a session over the budget gets one message per
    chunk of whole turns (``stage_one_chunks``), its input hash made of them all."""
    meta, kept = read_sessions(con, todo, context_window=settings.context_window)
    return render_requests(meta, kept, settings=settings, rules=rules, chunked=chunked)


def read_sessions(
    con: duckdb.DuckDBPyConnection, todo: pl.DataFrame, *, context_window: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The sessions of ``todo`` (``request_sessions``) and their kept items, sorted by
    session; their segments are stored on the way (every backend). A very large session's
    items are read in pieces and held near its ends (``io.session_items``): ``meta`` says
    what was left out (``gap_seq``, ``gap_chars``), counted by the request's builder."""
    ids = todo["rollout_id"].to_list()
    meta = fetch_pl(con, sql("request_sessions"), {"ids": ids})
    read = read_kept_items(con, ids, window=window_chars(context_window))
    store_segments(con, read.items)  # every backend: the sessions' segments, in the store
    if read.gaps.height:
        meta = meta.join(read.gaps, on="rollout_id", how="left")
    return meta, read.items


def render_requests(
    meta: pl.DataFrame,
    kept: pl.DataFrame,
    *,
    settings: Settings,
    rules: RuleSet,
    chunked: bool = False,
) -> list[Request]:
    """The requests of the sessions of ``meta`` from their kept items (``read_sessions``):
    pure work, no store (under Prefect, a task on the flow's task runner does it)."""
    # each session's items as a slice of ``kept`` (sorted by session): no copy
    bounds = kept.group_by("rollout_id", maintain_order=True).agg(n=pl.len())
    offsets = bounds["n"].cum_sum() - bounds["n"]
    per_rollout = {
        (rid,): kept.slice(int(offset), int(n))
        for rid, offset, n in zip(bounds["rollout_id"], offsets, bounds["n"], strict=True)
    }
    empty = kept.clear()
    requests = []
    for row, prompt in stage_one_inputs(
        meta,
        kept.lazy(),
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        rules=rules,
    ):
        rid = row["rollout_id"]
        session = per_rollout.get((rid,), empty)
        digest = hashlib.sha256(prompt.system.encode() + b"\0" + prompt.user.encode())
        parts = NO_PARTS
        if chunked and prompt.truncation.truncated:
            parts = stage_one_chunks(
                session,
                rollout_path=row["path"],
                rollout_cwd=row["cwd"],
                starts=turn_starts(session),
                segments=segment_items(session)["first_seq"].to_list(),
                budget=prompt.truncation.budget,
                context_window=settings.context_window,
                max_output_tokens=settings.max_output_tokens,
                rules=rules,
            )
        if len(parts) > 1:  # one chunk alone: the single message, cut, is that chunk
            digest = hashlib.sha256(STAGE_ONE_MERGE_VERSION.encode())
            parts = parts.measured(digest)
        else:
            parts = NO_PARTS
        requests.append(
            Request(
                rollout_id=rid,
                # a model is sent only the messages: the items are kept for the heuristic
                items=empty if chunked else session,
                facts=RolloutFacts(rollout_id=rid, cwd=row["cwd"], updated_at=row["updated_at"]),
                prompt=prompt,
                input_hash=digest.hexdigest(),
                parts=parts,
                header=(row["path"], row["cwd"]),
            )
        )
    return requests


def request_tokens(request: Request, out_each: int) -> tuple[int, int, int]:
    """``(requests, input tokens, output tokens)`` a request is expected to use: a chunked
    session's chunks and the merge of their answers (``out_each`` tokens each)."""
    if not request.parts:
        return 1, request_input_tokens(request.prompt), out_each
    tokens_in = sum(request.parts.input_tokens)
    merge_in = request.prompt.system_tokens + out_each * len(request.parts)
    return len(request.parts) + 1, tokens_in + merge_in, out_each * (len(request.parts) + 1)
