"""Which discovered files to read: a pure decision over fingerprints."""

from __future__ import annotations

from typing import cast

import polars as pl

FOUND_SCHEMA = {"path": pl.String, "size": pl.Int64, "mtime_ns": pl.Int64}
KNOWN_SCHEMA = {
    "file_id": pl.Int64,
    "path": pl.String,
    "size": pl.Int64,
    "mtime_ns": pl.Int64,
    "status": pl.String,
}
#: A file that could not be opened last time is read again even if its fingerprint is the same
#: (a permission fixed, a network mount back): nothing of it was stored.
RETRIED_STATUSES = ("unreadable",)


def plan_files(found: pl.DataFrame, known: pl.DataFrame) -> pl.DataFrame:
    """Classify every discovered file as ``new``, ``changed`` or ``unchanged``.

    A file is unchanged when its path, size and mtime equal the last ingest's and it could be
    read then; anything else about a known path is a change (a resumed session grows; a
    rewritten one may not).
    Returns ``path, size, mtime_ns, file_id, action``; ``file_id`` is kept for known files
    and freshly numbered (after the highest known id) for new ones.
    """
    joined = found.join(
        known.rename({"size": "old_size", "mtime_ns": "old_mtime_ns"}).select(
            "file_id", "path", "old_size", "old_mtime_ns", "status"
        ),
        on="path",
        how="left",
    )
    highest = known["file_id"].max() if known.height else None
    next_id = int(cast(int, highest) or 0) + 1
    action = (
        pl.when(pl.col("file_id").is_null())
        .then(pl.lit("new"))
        .when(
            (pl.col("size") == pl.col("old_size"))
            & (pl.col("mtime_ns") == pl.col("old_mtime_ns"))
            & ~pl.col("status").is_in(RETRIED_STATUSES).fill_null(False)
        )
        .then(pl.lit("unchanged"))
        .otherwise(pl.lit("changed"))
    )
    new_rank = pl.col("file_id").is_null().cast(pl.Int64).cum_sum()
    return (
        joined.with_columns(action=action)
        .with_columns(
            file_id=pl.coalesce(
                pl.col("file_id"),
                pl.when(pl.col("action") == "new").then(new_rank + next_id - 1),
            )
        )
        .select("path", "size", "mtime_ns", "file_id", "action")
    )


def batches(plan: pl.DataFrame, *, max_bytes: int, max_files: int) -> list[pl.DataFrame]:
    """Split the files to read into batches of bounded size (a large file is a batch alone)."""
    todo = plan.filter(pl.col("action") != "unchanged")
    out: list[pl.DataFrame] = []
    start = 0
    total = 0
    sizes = todo["size"].to_list()
    for i, size in enumerate(sizes):
        if i > start and (total + size > max_bytes or i - start >= max_files):
            out.append(todo.slice(start, i - start))
            start, total = i, 0
        total += size
    if start < len(sizes):
        out.append(todo.slice(start, len(sizes) - start))
    return out
