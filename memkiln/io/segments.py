"""The ``segments`` table: each extracted session's segments, replaced as a whole."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import polars as pl

from memkiln.io.store import sql, transaction
from memkiln.transforms.segments import segment_items

SEGMENT_COLUMNS = (
    "rollout_id",
    "segment_index",
    "first_seq",
    "last_seq",
    "started_at",
    "boundary",
    "turns",
)


def store_segments(con: duckdb.DuckDBPyConnection, kept: pl.DataFrame) -> int:
    """Segment the kept items of the sessions in ``kept`` and store their segments in place
    of any stored before for those sessions. Returns the number of rows written."""
    if kept.is_empty():
        return 0
    rows = (
        segment_items(kept)
        .select(SEGMENT_COLUMNS)
        .with_columns(created_at=pl.lit(datetime.now(UTC), dtype=pl.Datetime("us", "UTC")))
    )
    ids = kept["rollout_id"].unique().to_list()
    with transaction(con, new_segments=rows):
        con.execute(sql("delete_segments"), {"ids": ids})
        con.execute(sql("insert_segments"))
    return rows.height
