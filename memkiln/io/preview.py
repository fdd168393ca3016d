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
    build_stage_one_input,
)
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.render import contents_by_rollout
from memkiln.transforms.tokens import stage_one_keep_chars


def stage_one_input(
    items: pl.DataFrame,
    *,
    rollout_path: str,
    rollout_cwd: str | None,
    context_window: int | None,
    max_output_tokens: int = STAGE_ONE_MAX_OUTPUT_TOKENS,
    rules: RuleSet,
) -> StageOneInput:
    """Filter, render (redacted again) and budget one rollout's items into its messages."""
    contents = contents_by_rollout(
        filter_memory_items(items.lazy()),
        rules=rules,
        keep_chars=stage_one_keep_chars(context_window),
    ).collect()
    return build_stage_one_input(
        rollout_path=redact_text(rollout_path, rules=rules),
        rollout_cwd=redact_text(rollout_cwd, rules=rules) if rollout_cwd else None,
        rollout_contents=contents["contents"][0] if contents.height else "",
        omitted_chars=contents["omitted_chars"][0] if contents.height else 0,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
    )


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
        rollout_path=str(path),
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
