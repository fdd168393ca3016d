"""Stage-one input for one rollout, from a file on disk or from the store."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import polars as pl

from memkiln.errors import InputError
from memkiln.io.archive import FileStat, read_file
from memkiln.io.loader import looks_binary, normalize_lines
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.lines import split_lines
from memkiln.transforms.prompts import (
    STAGE_ONE_MAX_OUTPUT_TOKENS,
    StageOneInput,
)
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.render import stage_one_inputs


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
        raise InputError(f"{path} is not a file")
    st = os.stat(path)
    fb = read_file(FileStat(str(path.resolve()), st.st_size, st.st_mtime_ns))
    if not fb.data:
        raise InputError(f"{path}: {fb.detail or 'the file is empty'}")
    if looks_binary(fb.data):
        raise InputError(f"{path} is a binary file, not a rollout")
    read_error = fb.error
    lines = split_lines([(1, fb.data)])
    del fb  # the file's bytes are let go once split (a large file is not held twice)
    with duckdb.connect(":memory:") as con:
        norm = normalize_lines(
            con,
            lines,
            files=pl.DataFrame({"fid": [1], "path": [str(path)]}),
            rules=rules,
        )
    del lines
    if norm.rollouts.is_empty():
        raise InputError(
            f"{path} holds no Codex, Claude Code or Pi session that memkiln recognizes"
        )
    rollout = norm.rollouts.row(0, named=True)
    items = norm.items.with_columns(
        seq=pl.int_range(pl.len(), dtype=pl.Int32), rollout_id=pl.lit(rollout["rollout_id"])
    )
    result = stage_one_input(
        items,
        rollout_id=rollout["rollout_id"],
        rollout_path=os.path.abspath(path),  # the path ingest stores, as extraction sends it
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
