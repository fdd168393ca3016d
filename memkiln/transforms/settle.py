"""What a prepared ingest batch becomes once it meets the store: duplicate sessions settled,
items numbered, a status for every file.

Pure decisions over frames; what the store holds (the sessions other files already hold,
which of their files still exist) comes in as arguments from ``memkiln.io.loader``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.states import QuarantineReason

#: File statuses that count as failed files in a run's summary.
FAILED_STATUSES = ("unreadable", "corrupt", "binary", "unrecognized", "no_session", "bad_timestamp")

#: A session's times must fall between this and the ingest's time plus ``CLOCK_SKEW``: a time
#: before it, in the future, out of Python's range (year 0), without a zone or not a time at
#: all quarantines the session (a future one would look active for ever).
EARLIEST_TIME = datetime(1990, 1, 1, tzinfo=UTC)
CLOCK_SKEW = timedelta(days=1)
_QUARANTINE_TYPES = {
    "file_id": pl.Int64,
    "line_no": pl.Int32,
    "reason": pl.String,
    "detail": pl.String,
    "excerpt": pl.String,
    "bytes": pl.Int64,
}


def settle_times(
    rollouts: pl.DataFrame, quarantine: pl.DataFrame, *, now: datetime
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Sessions whose start or last update is missing or outside ``EARLIEST_TIME`` ..
    ``now + CLOCK_SKEW`` are quarantined alone (``bad_timestamp``, the times in the detail):
    ``(the rollouts kept, the quarantine with one row per such session, those sessions)``.
    Every time a session's lines carry that parses counts (an unparseable one is null), so
    one year-0 line is enough."""
    latest = now + CLOCK_SKEW
    ok = pl.col("started_at").is_between(EARLIEST_TIME, latest) & pl.col("updated_at").is_between(
        EARLIEST_TIME, latest
    )
    bad = rollouts.filter(~ok.fill_null(False))
    if not bad.height:
        return rollouts, quarantine, bad
    shown = pl.concat_str(
        [
            pl.lit("session "),
            pl.col("rollout_id"),
            pl.lit(" has no usable time: started "),
            _shown_time("started_at"),
            pl.lit(", updated "),
            _shown_time("updated_at"),
            pl.lit(
                f" (times must be ISO-8601 with a zone, between {EARLIEST_TIME:%Y-%m-%d}"
                f" and {latest:%Y-%m-%d})"
            ),
        ]
    )
    rows = bad.select(
        file_id="fid",
        line_no=pl.lit(None, dtype=pl.Int32),
        reason=pl.lit(QuarantineReason.BAD_TIMESTAMP.value),
        detail=shown,
        excerpt=pl.lit(None, dtype=pl.String),
        bytes=pl.lit(0, dtype=pl.Int64),
    ).cast(_QUARANTINE_TYPES)  # type: ignore[arg-type]
    quarantine = pl.concat([quarantine, rows], how="vertical_relaxed")
    return rollouts.filter(ok.fill_null(False)), quarantine, bad


def _shown_time(column: str) -> pl.Expr:
    """A time as text, whatever its year (Python's dates stop at years 1 and 9999)."""
    return pl.col(column).dt.to_string("%Y-%m-%dT%H:%M:%SZ").fill_null(pl.lit("(none)"))


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
                    reason=pl.lit(QuarantineReason.DUPLICATE_ROLLOUT.value),
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
    files: pl.DataFrame,
    per_file: pl.DataFrame,
    rollouts: pl.DataFrame,
    dup: pl.DataFrame,
    timeless: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``files`` with their format, line counts and final status: ``duplicate``,
    ``bad_timestamp`` (its session quarantined by :func:`settle_times`: ``timeless``),
    ``unrecognized`` (JSON lines of no known format), ``no_session`` (lines of a known format
    but no session id: no header line, no id in the file name), ``partial`` (some lines
    quarantined), or the status reading gave them."""
    timeless = dup.select("fid").clear() if timeless is None else timeless
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
        .join(timeless.select(file_id="fid", timeless=pl.lit(True)), on="file_id", how="left")
        .with_columns(
            status=pl.when(pl.col("dup").fill_null(False))
            .then(pl.lit("duplicate"))
            .when(pl.col("timeless").fill_null(False))
            .then(pl.lit("bad_timestamp"))
            .when((pl.col("status") == "ok") & pl.col("format").is_null() & (pl.col("lines") > 0))
            .then(pl.lit("unrecognized"))
            .when(
                pl.col("status").is_in(["ok", "partial"])
                & pl.col("format").is_not_null()
                & pl.col("rollout_id").is_null()
            )
            .then(pl.lit("no_session"))
            .when((pl.col("status") == "ok") & (pl.col("quarantined") > 0))
            .then(pl.lit("partial"))
            .otherwise(pl.col("status")),
            lines=pl.col("lines").fill_null(0),
            quarantined=pl.col("quarantined").fill_null(0),
        )
        .drop("dup", "timeless")
    )


def with_unrecognized(quarantine: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """The quarantine with one row per file of an unknown format, and per file of a known
    format without a session id, each row with its file's path."""
    unrecognized = files.filter(pl.col("status").is_in(["unrecognized", "no_session"]))
    if unrecognized.height:
        no_session = pl.col("status") == "no_session"
        quarantine = pl.concat(
            [
                quarantine,
                unrecognized.select(
                    file_id="file_id",
                    line_no=pl.lit(None, dtype=pl.Int32),
                    reason=pl.when(no_session)
                    .then(pl.lit(QuarantineReason.NO_SESSION.value))
                    .otherwise(pl.lit(QuarantineReason.UNRECOGNIZED_FORMAT.value)),
                    detail=pl.when(no_session)
                    .then(
                        pl.concat_str(
                            [
                                pl.lit("lines of a "),
                                pl.col("format"),
                                pl.lit(
                                    " session, but no session id (no header line, no id in "
                                    "the file name)"
                                ),
                            ]
                        )
                    )
                    .otherwise(
                        pl.lit("valid JSON lines, but not a Codex, Claude Code or Pi session")
                    ),
                    excerpt=pl.lit(None, dtype=pl.String),
                    bytes="size",
                ),
            ],
            how="vertical_relaxed",
        )
    return quarantine.join(files.select("file_id", "path"), on="file_id", how="left")


def set_aside(quarantine: pl.DataFrame) -> list[str]:
    """One line per file and reason of what was quarantined (``path, line_no, reason,
    detail``), for the person who runs the job: ``<path> line <n>: <reason> (<detail>)``,
    or ``<path>: <reason>, <n> lines from line <first>`` for several."""
    if quarantine.is_empty():
        return []
    grouped = quarantine.group_by("path", "reason", maintain_order=True).agg(
        n=pl.len(),
        first=pl.col("line_no").min(),
        detail=pl.col("detail").drop_nulls().first(),
    )
    where = pl.when(pl.col("first").is_not_null() & (pl.col("n") == 1)).then(
        pl.format(" line {}", pl.col("first"))
    )
    many = pl.when(pl.col("n") > 1).then(
        pl.format(
            ", {} entries{}",
            pl.col("n"),
            pl.when(pl.col("first").is_not_null())
            .then(pl.format(" from line {}", pl.col("first")))
            .otherwise(pl.lit("")),
        )
    )
    detail = pl.when(pl.col("detail").is_not_null()).then(pl.format(" ({})", pl.col("detail")))
    return (
        grouped.select(
            pl.concat_str(
                [
                    pl.col("path").fill_null("?"),
                    where.fill_null(""),
                    pl.lit(": "),
                    pl.col("reason"),
                    many.fill_null(""),
                    detail.fill_null(""),
                ]
            )
        )
        .to_series()
        .to_list()
    )
