"""What a prepared ingest batch becomes once it meets the store: duplicate sessions settled,
items numbered, a status for every file.

Pure decisions over frames; what the store holds (the sessions other files already hold,
which of their files still exist) comes in as arguments from ``memkiln.io.loader``.
"""

from __future__ import annotations

import polars as pl

#: File statuses that count as failed files in a run's summary.
FAILED_STATUSES = ("unreadable", "corrupt", "binary", "unrecognized")


def settle_duplicates(
    rollouts: pl.DataFrame, quarantine: pl.DataFrame, held: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """A session already held by another file (``held``: ``rollout_id, holder`` of files that
    are still present), or twice in this batch (the lowest file id keeps it), is a duplicate:
    ``(the rollouts kept, the quarantine with one row per duplicate, the duplicates)``."""
    rollouts = rollouts.join(held, on="rollout_id", how="left").with_columns(
        duplicate=pl.col("holder").is_not_null()
        | pl.col("rollout_id").is_duplicated()
        & (pl.col("fid") != pl.col("fid").min().over("rollout_id"))
    )
    dup = rollouts.filter("duplicate")
    if dup.height:
        quarantine = pl.concat(
            [
                quarantine,
                dup.select(
                    file_id="fid",
                    line_no=pl.lit(None, dtype=pl.Int32),
                    reason=pl.lit("duplicate_rollout"),
                    detail=pl.concat_str(
                        [
                            pl.lit("session "),
                            pl.col("rollout_id"),
                            pl.lit(" is already held by another file"),
                        ]
                    ),
                    excerpt=pl.lit(None, dtype=pl.String),
                    bytes=pl.lit(0, dtype=pl.Int64),
                ),
            ],
            how="vertical_relaxed",
        )
    return rollouts.filter(~pl.col("duplicate")).drop("holder", "duplicate"), quarantine, dup


def number_items(items: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """The items of the files whose session is kept, each with its session's id and its
    position in the file. Items are in file order already: no join and no sort, which would
    copy every text."""
    held_fids = rollouts["fid"].implode()
    if not items["fid"].is_in(held_fids).all():
        items = items.filter(pl.col("fid").is_in(held_fids))
    return items.with_columns(
        rollout_id=pl.col("fid").replace_strict(
            rollouts["fid"], rollouts["rollout_id"], return_dtype=pl.String
        ),
        seq=pl.int_range(pl.len(), dtype=pl.Int32).over("fid"),
    )


def file_statuses(
    files: pl.DataFrame, per_file: pl.DataFrame, rollouts: pl.DataFrame, dup: pl.DataFrame
) -> pl.DataFrame:
    """``files`` with their format, line counts and final status: ``duplicate``,
    ``unrecognized`` (JSON lines of no known format), ``partial`` (some lines quarantined),
    or the status reading gave them."""
    return (
        files.join(
            per_file.select(
                file_id="fid", format="format", lines="n_lines", quarantined="n_quarantined"
            ),
            on="file_id",
            how="left",
        )
        .join(rollouts.select(file_id="fid", rollout_id="rollout_id"), on="file_id", how="left")
        .join(dup.select(file_id="fid", dup=pl.lit(True)), on="file_id", how="left")
        .with_columns(
            status=pl.when(pl.col("dup").fill_null(False))
            .then(pl.lit("duplicate"))
            .when((pl.col("status") == "ok") & pl.col("format").is_null() & (pl.col("lines") > 0))
            .then(pl.lit("unrecognized"))
            .when((pl.col("status") == "ok") & (pl.col("quarantined") > 0))
            .then(pl.lit("partial"))
            .otherwise(pl.col("status")),
            lines=pl.col("lines").fill_null(0),
            quarantined=pl.col("quarantined").fill_null(0),
        )
        .drop("dup")
    )


def with_unrecognized(quarantine: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """The quarantine with one row per file of an unknown format, each row with its file's
    path."""
    unrecognized = files.filter(pl.col("status") == "unrecognized")
    if unrecognized.height:
        quarantine = pl.concat(
            [
                quarantine,
                unrecognized.select(
                    file_id="file_id",
                    line_no=pl.lit(None, dtype=pl.Int32),
                    reason=pl.lit("unrecognized_format"),
                    detail=pl.lit("valid JSON lines, but not a Codex, Claude Code or Pi session"),
                    excerpt=pl.lit(None, dtype=pl.String),
                    bytes="size",
                ),
            ],
            how="vertical_relaxed",
        )
    return quarantine.join(files.select("file_id", "path"), on="file_id", how="left")
