"""A large session file read in pieces: what one piece hands the next, and the session the
pieces make together, as if the file had been read at once.

Pure decisions over frames; the reading and writing are ``memkiln.io.large_file``.
"""

from __future__ import annotations

import polars as pl

from memkiln.transforms.normalize import legacy_codex_header

#: Header lines (a Codex ``session_meta``, a bare legacy header, a Pi ``session``) of a file
#: kept for the next pieces at most: a session has one, a resumed or forked one a few; a
#: stream of garbage headers does not grow what is carried.
MAX_HEADER_LINES = 64

#: Rollout columns that count the whole file's items: the sum over its pieces.
SUMMED = ("n_items", "n_user_messages", "n_tool_calls", "omitted_bytes")


def fields_that_matter(narrow: pl.DataFrame) -> pl.DataFrame:
    """The rows of the rollout fields (``normalize.rollout_fields``) of some lines that
    ``normalize.build_rollouts`` can take a value from: the header lines (the first
    ``MAX_HEADER_LINES`` of each file), and for each field the first line where it is set
    (and the first line that says it is a sidechain, and the first that says it is not).
    ``build_rollouts`` takes each value from the first line that holds it, so it gives the
    same session from these rows as from all of them, however many lines follow."""
    if narrow.is_empty():
        return narrow
    narrow = narrow.sort("fid", "line_no")
    t = pl.col("type")
    header = (
        (pl.col("has_payload") & (t == "session_meta"))
        | legacy_codex_header()
        | ((t == "session") & ~pl.col("has_payload"))
    ).fill_null(False)
    line = pl.col("line_no")

    def first_where(cond: pl.Expr) -> pl.Expr:
        cond = cond.fill_null(False)
        return cond & (line == line.filter(cond).min().over("fid"))

    keep = header & (header.cast(pl.Int64).cum_sum().over("fid") <= MAX_HEADER_LINES)
    for column in narrow.columns:
        if column not in ("fid", "line_no"):
            keep = keep | first_where(pl.col(column).is_not_null())
    keep = keep | first_where(pl.col("is_sidechain") == "true")
    keep = keep | first_where(pl.col("is_sidechain") == "false")
    return narrow.filter(keep)


def merged_rollout(rows: pl.DataFrame, *, n_lines: int, n_quarantined: int) -> pl.DataFrame:
    """The session of a file from the rows its pieces gave (one per piece that held some of
    it, in order): the last row's identity (built from every piece's fields before it), the
    counts summed, the earliest start, the latest update, and the file's lines and
    quarantined lines."""
    if rows.is_empty():
        return rows
    return rows.select(
        (
            pl.col(c).sum().cast(rows.schema[c])
            if c in SUMMED
            else pl.col(c).min()
            if c == "started_at"
            else pl.col(c).max()
            if c == "updated_at"
            else pl.lit(n_lines, dtype=rows.schema[c])
            if c == "n_lines"
            else pl.lit(n_quarantined, dtype=rows.schema[c])
            if c == "n_quarantined"
            else pl.col(c).last()
        ).alias(c)
        for c in rows.columns
    )


def unanswered_calls(items: pl.DataFrame, tool_calls: pl.DataFrame) -> pl.DataFrame:
    """The items of ``items`` that are tool calls without an output in ``tool_calls``: a
    call in one piece whose output is in a later one is paired there."""
    waiting = tool_calls.filter(~pl.col("has_output")).select("rollout_id", "seq")
    return items.join(waiting, on=["rollout_id", "seq"], how="semi")


#: The reason a file's quarantined lines past the limit are counted under, not listed.
TOO_MANY_BAD_LINES = "too_many_bad_lines"


def capped_quarantine(quarantine: pl.DataFrame, *, limit: int, rest: str) -> pl.DataFrame:
    """The quarantine rows of some files (``file_id, line_no, reason, detail, …``), at most
    ``limit`` of them per file: its whole-file rows first, then its lines in order. A file
    past the limit gets, in place of the others, one ``too_many_bad_lines`` row that says
    how many were not listed (their bytes summed) and, after that, ``rest``. A file read
    whole (in a batch) is held to the limit a large file read in pieces is held to
    (``memkiln.io.large_file``, which also stops reading there)."""
    if quarantine.is_empty():
        return quarantine
    ordered = quarantine.with_row_index("__at").sort(
        "file_id", "line_no", "__at", nulls_last=False, maintain_order=True
    )
    rank = pl.int_range(pl.len()).over("file_id")
    listed = ordered.filter(rank < limit)
    over = ordered.filter(rank >= limit)
    if over.is_empty():
        return quarantine
    counted = over.group_by("file_id", maintain_order=True).agg(
        n=pl.len(), bytes=pl.col("bytes").sum()
    )
    stops = counted.select(
        "file_id",
        line_no=pl.lit(None, dtype=quarantine.schema["line_no"]),
        reason=pl.lit(TOO_MANY_BAD_LINES),
        detail=pl.format(
            "more than {} lines quarantined (the first {} are listed, {} more are not): {}",
            pl.lit(limit),
            pl.lit(limit),
            pl.col("n"),
            pl.lit(rest),
        ),
        excerpt=pl.lit(None, dtype=pl.String),
        bytes="bytes",
    )
    listed = listed.drop("__at")
    return pl.concat([listed, stops], how="diagonal_relaxed").cast(listed.schema)
