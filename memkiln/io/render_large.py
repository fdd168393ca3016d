"""``memkiln render-input`` for a session file past ``WHOLE_FILE_BYTES`` of lines: the file is
read the way ingest reads it (in pieces, ``large_file.LargeFile``) into a scratch store in a
temporary folder, and its message is built the way extraction builds it from a store
(``session_items.read_kept_items`` then ``render.stage_one_inputs``): what is shown is what
is sent, whole, in the memory ingest and extraction take (a file of up to ``MAX_FILE_BYTES``
is never held whole). The scratch store goes with the folder.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl

from memkiln.errors import InputError
from memkiln.io.archive import FileStat, shown_path
from memkiln.io.large_file import LargeFile
from memkiln.io.loader import json_parser
from memkiln.io.session_items import read_kept_items, window_chars
from memkiln.io.store import fetch_pl, open_store, sql
from memkiln.transforms.prompts import StageOneInput
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.render import stage_one_inputs

#: The run id the scratch store's rows carry (no run is recorded).
SCRATCH_RUN = "render-input"


def large_file_input(
    path: Path,
    stat: FileStat,
    *,
    context_window: int | None,
    max_output_tokens: int,
    rules: RuleSet,
) -> tuple[StageOneInput, dict[str, object]]:
    """The stage-one input of the large rollout file ``path`` and the facts shown beside it
    (format, rollout id, quarantined lines, read error)."""
    shown = shown_path(str(path))
    with tempfile.TemporaryDirectory(prefix="memkiln-render-") as scratch:
        con = open_store(Path(scratch) / "render.duckdb")
        try:
            parser = json_parser()
            large = LargeFile(con, parser, stat, 1, run_id=SCRATCH_RUN, rules=rules)
            try:
                large.ingest()
            finally:
                parser.close()
            rollouts = fetch_pl(con, sql("scratch_rollouts"))
            quarantine = fetch_pl(con, sql("scratch_quarantine"))
            if rollouts.is_empty():
                timeless = quarantine.filter(pl.col("reason") == "bad_timestamp")
                if timeless.height:  # what ingest quarantines is never extracted
                    raise InputError(f"{shown}: {timeless['detail'][0]}")
                raise InputError(
                    f"{shown} holds no Codex, Claude Code or Pi session that memkiln recognizes"
                )
            rollout = rollouts.row(0, named=True)
            rid = rollout["rollout_id"]
            read = read_kept_items(con, [rid], window=window_chars(context_window))
        finally:
            con.close()
    session = pl.DataFrame(
        {
            "rollout_id": [rid],
            "path": [shown_path(os.path.abspath(path))],  # the path ingest stores
            "cwd": [rollout["cwd"]],
        },
        schema={"rollout_id": pl.String, "path": pl.String, "cwd": pl.String},
    ).join(read.gaps, on="rollout_id", how="left")
    ((_, built),) = stage_one_inputs(
        session,
        read.items.lazy(),
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        rules=rules,
    )
    facts: dict[str, object] = {
        "format": rollout["format"],
        "rollout_id": rid,
        "quarantined_lines": quarantine.height,
        "read_error": large.read_error,
    }
    return built, facts
