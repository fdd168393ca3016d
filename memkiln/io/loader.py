"""Load one batch of rollout files into DuckDB: read, split, clean, parse, normalize, write.

This is the side-effect layer the ingest flow calls once per batch. The decisions are in
``memkiln.transforms``; DuckDB's JSON reader does the parsing (one parse per line for all
fields; Polars' JSON decoding fails a whole column on one bad line). A batch is written in
one transaction, so a killed run leaves every file either fully ingested or untouched.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from memkiln.constants import (
    BATCH_DECOMPRESSED_BYTES,
    MAX_BAD_LINES,
    MAX_LINE_BYTES,
    PARSER_DUCKDB_THREADS,
    PART_BYTES,
    POLARS_ENGINE,
    QUARANTINE_EXCERPT_CHARS,
    WHOLE_FILE_BYTES,
)
from memkiln.io.archive import FileStat, content_hash, path_key, read_file, shown_path
from memkiln.io.rules import load_rules
from memkiln.io.store import execute, fetch_pl, now, registered, sql, transaction
from memkiln.transforms.lines import (
    SURROGATE_ESCAPE,
    UTF8_BOM,
    classify_lines,
    clean_lines,
    mend_lone_surrogates,
    quarantine_excerpts,
    split_lines,
)
from memkiln.transforms.normalize import (
    ITEM_COLUMNS,
    build_items,
    build_rollouts,
    content_arrays,
    detect_formats,
    fill_timestamps,
    format_votes,
    formats_from_votes,
    payload_text_paths,
    redact_items,
    redact_rollouts,
    rollout_fields,
)
from memkiln.transforms.pieces import capped_quarantine
from memkiln.transforms.redact import (
    REDACTED,
    RuleSet,
    redact_expr,
    redact_text,
)
from memkiln.transforms.redact_across import concat_across_parts, redact_across_frame
from memkiln.transforms.settle import (
    FAILED_STATUSES,
    file_statuses,
    number_items,
    set_aside,
    settle_duplicates,
    settle_times,
    with_unrecognized,
)
from memkiln.transforms.tool_calls import build_tool_calls

#: Lines of a batch parsed in one part (a batch of the default size, 32 MiB, is one part, so
#: each line is parsed once; a larger batch, or one huge file, is cut into parts and each part
#: parsed twice: once for the formats, once for the items).
PARSE_PART_BYTES = 2 * PART_BYTES

#: Frames handed to DuckDB as Arrow with Polars' own string layout (string views): DuckDB
#: reads them as they are, where the default compatibility level copies every string first.
ARROW_OUT = pl.CompatLevel.newest()

_RESULT_ERROR_TYPES = pl.Schema(
    {"fid": pl.Int64(), "line_no": pl.Int32(), "is_error": pl.Boolean()}
)

#: The rows of the ``files`` table a batch writes (and a large file's pieces).
FILES_SCHEMA = {
    "file_id": pl.Int64,
    "path_key": pl.String,
    "path": pl.String,
    "compression": pl.String,
    "size": pl.Int64,
    "mtime_ns": pl.Int64,
    "content_hash": pl.String,
    "status": pl.String,
}
QUARANTINE_SCHEMA = {
    "file_id": pl.Int64,
    "line_no": pl.Int32,
    "reason": pl.String,
    "detail": pl.String,
    "excerpt": pl.String,
    "bytes": pl.Int64,
}

#: What a whole file's ``too_many_bad_lines`` row says after the count: its lines were read.
WHOLE_FILE_REST = "the file's other lines are stored"

#: A file of a batch read in pieces by the writer (``memkiln.io.large_file``).
LARGE_SCHEMA = {"file_id": pl.Int64, "raw_path": pl.Binary, "size": pl.Int64, "mtime_ns": pl.Int64}


@dataclass
class BatchResult:
    """What one batch did, for the run summary."""

    files: int = 0
    bytes_read: int = 0
    rollouts: int = 0
    items: int = 0
    quarantined: int = 0
    failed_files: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    #: one line per file and reason of what this batch quarantined (``settle.set_aside``)
    set_aside: list[str] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)

    def add(self, other: BatchResult) -> None:
        """Count ``other`` in this result too."""
        self.files += other.files
        self.bytes_read += other.bytes_read
        self.rollouts += other.rollouts
        self.items += other.items
        self.quarantined += other.quarantined
        self.failed_files += other.failed_files
        self.hits = dict(Counter(self.hits) + Counter(other.hits))
        self.set_aside.extend(other.set_aside)
        self.statuses = dict(Counter(self.statuses) + Counter(other.statuses))


@dataclass
class PreparedBatch:
    """A batch read and normalized, ready to be written (``prepare_batch``)."""

    files: pl.DataFrame  # file_id, path, compression, size, mtime_ns, content_hash, status
    norm: Normalized
    bytes_read: int
    #: files over ``WHOLE_FILE_BYTES`` of lines, left to the writer to read in pieces
    large: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=LARGE_SCHEMA))

    def to_ipc(self) -> dict[str, Any]:
        """The batch as Arrow IPC streams (one per frame) and two small values: what a
        worker process sends back to the writer (no pickled rows)."""
        frames = {
            "files": self.files,
            "items": self.norm.items,
            "rollouts": self.norm.rollouts,
            "quarantine": self.norm.quarantine,
            "per_file": self.norm.per_file,
            "result_errors": self.norm.result_errors,
            "large": self.large,
        }
        return {
            "frames": {name: frame_to_ipc(frame) for name, frame in frames.items()},
            "hits": dict(self.norm.hits),
            "bytes_read": int(self.bytes_read),
        }

    @classmethod
    def from_ipc(cls, data: dict[str, Any]) -> PreparedBatch:
        f = {name: frame_from_ipc(raw) for name, raw in data["frames"].items()}
        norm = Normalized(
            f["items"],
            f["rollouts"],
            f["quarantine"],
            f["per_file"],
            dict(data["hits"]),
            result_errors=f["result_errors"],
        )
        return cls(
            files=f["files"], norm=norm, bytes_read=int(data["bytes_read"]), large=f["large"]
        )


def frame_to_ipc(frame: pl.DataFrame) -> bytes:
    """A frame as an uncompressed Arrow IPC stream (the receiver maps it without parsing)."""
    sink = io.BytesIO()
    frame.write_ipc_stream(sink, compression="uncompressed")
    return sink.getvalue()


def frame_from_ipc(raw: bytes) -> pl.DataFrame:
    return pl.read_ipc_stream(io.BytesIO(raw))


class WireFrame:
    """A frame a task runner carries: handed over as it is within a process (Prefect's
    thread runner: shared, not copied) and pickled as an uncompressed Arrow IPC stream to
    another (a Dask worker; a frame's own pickle is about 8 times slower). Extraction's units
    carry their frames so (``memkiln.llm.units``). Ingest's batches still cross as IPC bytes
    (``PreparedBatch.to_ipc``) even within a process: the copy compacts the parsed frames,
    and sharing them instead raised ingest's peak under Prefect (1.21 -> 1.28 GB, eight
    sessions of 30 MiB)."""

    __slots__ = ("frame",)

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return _wire_frame_from_ipc, (frame_to_ipc(self.frame),)


def _wire_frame_from_ipc(raw: bytes) -> WireFrame:
    return WireFrame(frame_from_ipc(raw))


def prepare_batch_ipc(batch_ipc: bytes) -> dict[str, Any]:
    """:func:`prepare_batch` for a batch plan sent as Arrow IPC, its result as Arrow IPC: the
    unit of work a task runner spreads (it reads files, writes nothing). The rules are the
    packaged ones; the JSON parser is an in-memory DuckDB of its own."""
    batch = frame_from_ipc(batch_ipc)
    parser = json_parser()
    try:
        return prepare_batch(parser, batch, rules=load_rules()).to_ipc()
    finally:
        parser.close()


def json_parser() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection used only as the JSON parser of :func:`prepare_batch`,
    on one thread (``PARSER_DUCKDB_THREADS``). Its results come back as Arrow string views,
    which Polars takes without copying them."""
    parser = duckdb.connect()
    parser.execute(sql("set_arrow_string_view"))
    execute(parser, "set_threads", threads=PARSER_DUCKDB_THREADS)
    return parser


def prepare_batch(
    parser: duckdb.DuckDBPyConnection, batch: pl.DataFrame, *, rules: RuleSet
) -> PreparedBatch:
    """Read, split, redact, parse and normalize the files of ``batch``; write nothing.

    ``parser`` is only used as DuckDB's JSON parser: an in-memory connection of its own lets
    the next batch be prepared in a worker thread while the store writes the current one.
    """
    # 1. read and decompress, file by file; the batch is split, parsed and normalized in parts
    # of about BATCH_DECOMPRESSED_BYTES (small compressed files may hold far more than their
    # size), so at most one part's bytes are held at once. A file of more than
    # WHOLE_FILE_BYTES of lines is left to the writer, which reads it in pieces.
    large: list[tuple[int, bytes, int, int]] = []
    file_rows: list[dict[str, object]] = []
    whole_file_quarantine: list[dict[str, object]] = []
    chunks: list[tuple[int, bytes]] = []
    parts: list[Normalized] = []
    held = bytes_read = 0
    raw_paths = batch["raw_path"] if "raw_path" in batch.columns else batch["path"].cast(pl.Binary)
    for path, size, mtime, fid in zip(
        raw_paths, batch["size"], batch["mtime_ns"], batch["file_id"], strict=True
    ):
        fb = read_file(FileStat(os.fsdecode(path), size, mtime), max_bytes=WHOLE_FILE_BYTES)
        if fb.error == "file_too_large":
            large.append((fid, path, size, mtime))
            continue
        status = "ok"
        if fb.error == "unreadable_file" and not fb.data:
            status = "unreadable"
        elif fb.error and not fb.data:
            status = "corrupt"
        elif not fb.data:
            status = "partial" if fb.long_lines else "empty"
        elif looks_binary(fb.data):
            status = "binary"
        if fb.error:
            whole_file_quarantine.append(
                _file_quarantine(fid, fb.error, fb.detail, fb.stat.size, rules=rules)
            )
        whole_file_quarantine.extend(
            _file_quarantine(
                fid,
                "line_too_long",
                f"{long.nbytes} bytes, over the limit of {MAX_LINE_BYTES}",
                long.nbytes,
                rules=rules,
                line_no=long.line_no,
            )
            for long in fb.long_lines
        )
        if status == "binary":
            whole_file_quarantine.append(
                _file_quarantine(
                    fid, "binary_file", "NUL bytes in the file", len(fb.data), rules=rules
                )
            )
        elif fb.data:
            chunks.append((fid, fb.data))
            held += len(fb.data)
            bytes_read += len(fb.data)
        file_rows.append(
            {
                "file_id": fid,
                "path_key": path_key(fb.stat.path),
                "path": shown_path(fb.stat.path),
                "compression": fb.stat.compression,
                "size": fb.stat.size,
                "mtime_ns": fb.stat.mtime_ns,
                "content_hash": content_hash(fb.data) if fb.data else None,
                "status": status if not fb.error or status != "ok" else "partial",
            }
        )
        del fb
        if held >= BATCH_DECOMPRESSED_BYTES:
            parts.append(_normalize_part(parser, chunks, file_rows, rules=rules))
            chunks, held = [], 0
    files = pl.DataFrame(file_rows, schema=FILES_SCHEMA)

    # 2-5. split, redact, parse and normalize (the file bytes are let go once split)
    if chunks or not parts:
        parts.append(_normalize_part(parser, chunks, file_rows, rules=rules))
    del chunks
    norm = _merged(
        parts,
        files=files.select(fid="file_id", path="path"),
        extra_quarantine=pl.DataFrame(whole_file_quarantine, schema=QUARANTINE_SCHEMA),
    )
    # the real path was needed to name sessions (a uuid in the file name); stored, it is redacted
    files = files.with_columns(path=redact_expr(pl.col("path"), rules=rules))
    return PreparedBatch(
        files=files,
        norm=norm,
        bytes_read=bytes_read,
        large=pl.DataFrame(large, schema=LARGE_SCHEMA, orient="row"),
    )


def _normalize_part(
    parser: duckdb.DuckDBPyConnection,
    chunks: list[tuple[int, bytes]],
    file_rows: list[dict[str, object]],
    *,
    rules: RuleSet,
) -> Normalized:
    """The files of ``chunks`` (some of a batch's) split, parsed and normalized; the chunk
    list is emptied, so its bytes go once split."""
    fids = {fid for fid, _ in chunks}
    files = pl.DataFrame(
        [(r["file_id"], r["path"]) for r in file_rows if r["file_id"] in fids],
        schema={"fid": pl.Int64, "path": pl.String},
        orient="row",
    )
    lines = split_lines(chunks)
    chunks.clear()
    return normalize_lines(parser, lines, files=files, rules=rules)


def _merged(
    parts: list[Normalized], *, files: pl.DataFrame, extra_quarantine: pl.DataFrame
) -> Normalized:
    """The parts of a batch as one, with the whole-file quarantine rows, and every file of the
    batch in ``per_file`` (a file that gave no line, too)."""
    hits: Counter[str] = Counter()
    for part in parts:
        hits.update(part.hits)
    quarantine = pl.concat(
        [extra_quarantine, *(p.quarantine for p in parts)], how="vertical_relaxed"
    )
    # at most MAX_BAD_LINES quarantined lines listed per file, as for a large file
    quarantine = capped_quarantine(quarantine, limit=MAX_BAD_LINES, rest=WHOLE_FILE_REST)
    seen = pl.concat([p.per_file for p in parts], how="vertical_relaxed")
    counted = quarantine.group_by("file_id").agg(n=pl.len()).rename({"file_id": "fid"})
    per_file = (
        files.join(seen.drop("path", "n_quarantined"), on="fid", how="left")
        .join(counted, on="fid", how="left")
        .with_columns(
            n_lines=pl.col("n_lines").fill_null(0),
            n_quarantined=pl.col("n").fill_null(0).cast(pl.Int64),
        )
        .select(seen.columns)
    )
    rollouts = pl.concat([p.rollouts for p in parts], how="vertical_relaxed")
    # a rollout counts the whole-file quarantine rows of its file too
    rollouts = (
        rollouts.drop("n_quarantined")
        .join(per_file.select("fid", "n_quarantined"), on="fid", how="left")
        .select(parts[0].rollouts.columns)
    )
    return Normalized(
        pl.concat([p.items for p in parts], how="vertical_relaxed"),
        rollouts,
        quarantine,
        per_file,
        dict(hits),
        result_errors=pl.concat([p.result_errors for p in parts], how="vertical_relaxed"),
    )


def prepared_batches(
    todo: Sequence[pl.DataFrame], *, rules: RuleSet
) -> Generator[tuple[pl.DataFrame, PreparedBatch], None, None]:
    """``(batch, prepared)`` for every batch in order, the next one prepared in a worker thread
    while the caller writes the current one (both libraries release the GIL).

    At most two batches are in memory at once. The worker has its own in-memory DuckDB
    connection; the store is only touched by the caller.
    """
    if not todo:
        return
    parser = json_parser()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memkiln-prepare")
    try:
        ahead = pool.submit(prepare_batch, parser, todo[0], rules=rules)
        for i, batch in enumerate(todo):
            prepared = ahead.result()
            if i + 1 < len(todo):
                ahead = pool.submit(prepare_batch, parser, todo[i + 1], rules=rules)
            yield batch, prepared
            del prepared
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        parser.close()


def write_batch(
    con: duckdb.DuckDBPyConnection, prepared: PreparedBatch, *, run_id: str
) -> BatchResult:
    """Settle duplicates and file statuses against the store, then write the batch in one
    transaction."""
    files, norm = prepared.files, prepared.norm
    result = BatchResult(files=files.height, bytes_read=prepared.bytes_read, hits=norm.hits)
    items, rollouts, quarantine, per_file = (
        norm.items,
        norm.rollouts,
        norm.quarantine,
        norm.per_file,
    )

    # 6. a session already held by another file (or twice in this batch) is a duplicate,
    # unless that file is gone (an archive moved or reached by another path): then this file
    # takes the session over, with whatever it holds now
    fids = files["file_id"].to_list()
    held, released = holders(con, fids, rollouts["rollout_id"].to_list())
    rollouts, quarantine, dup = settle_duplicates(rollouts, quarantine, held)
    rollouts, quarantine, timeless = settle_times(rollouts, quarantine, now=now())
    items = number_items(items, rollouts)
    tool_calls = build_tool_calls(items.lazy(), result_errors=norm.result_errors.lazy()).collect(
        engine=POLARS_ENGINE
    )

    # 7. file statuses
    files = file_statuses(files, per_file, rollouts, dup, timeless)
    quarantine = with_unrecognized(quarantine, files)
    statuses = dict(files.group_by("status").len().iter_rows())
    failed = files.filter(pl.col("status").is_in(FAILED_STATUSES)).height

    # 8. a file stored before that cannot be opened now keeps what was stored and its
    # fingerprint (so the next run reads it again); only the failure is recorded
    unreadable = files.filter(pl.col("status") == "unreadable")["file_id"].to_list()
    if unreadable:
        stored = fetch_pl(
            con,
            sql("files_stored"),
            {"fids": unreadable},
        )["file_id"]
        files = files.filter(~pl.col("file_id").is_in(stored.implode()))

    # 9. write, in one transaction
    _write(
        con,
        released=released,
        files=files,
        rollouts=rollouts,
        items=items,
        tool_calls=tool_calls,
        quarantine=quarantine,
        run_id=run_id,
        hits=result.hits,
    )
    result.rollouts = rollouts.height
    result.items = items.height
    result.quarantined = quarantine.height
    result.set_aside = set_aside(quarantine)
    result.statuses = statuses
    result.failed_files = failed
    # the batch's large files (``prepared.large``) are read in pieces by
    # ``io.large_file.ingest_large_files``, which builds on this module: its caller runs it next
    return result


def holders(
    con: duckdb.DuckDBPyConnection, fids: list[int], ids: list[str]
) -> tuple[pl.DataFrame, list[int]]:
    """``(held, released)``: the sessions of ``ids`` other files than ``fids`` hold
    (``rollout_id, holder``), and the files holding some of them that are gone (an archive
    moved or reached by another path), whose sessions these files take over."""
    held = fetch_pl(con, sql("sessions_held_elsewhere"), {"fids": fids, "ids": ids})
    # a stored path holding a redacted secret cannot be checked: its file is taken as present
    gone = held.filter(
        pl.Series(
            [REDACTED not in p and not os.path.exists(p) for p in held["holder_path"]],
            dtype=pl.Boolean,
        )
    )
    released = gone["holder"].unique().to_list()
    held = held.join(gone.select("holder"), on="holder", how="anti").drop("holder_path")
    return held, released


@dataclass
class Normalized:
    """A batch after splitting, redaction, parsing and normalization (not yet written)."""

    items: pl.DataFrame
    rollouts: pl.DataFrame
    quarantine: pl.DataFrame
    per_file: pl.DataFrame  # fid, path, format, n_lines, n_quarantined
    hits: dict[str, int]
    #: fid, line_no, is_error of lines that flag a tool result (Pi's ``isError``)
    result_errors: pl.DataFrame = field(default_factory=lambda: _no_result_errors())
    #: a piece of a large file: the rollout fields its session was built from (those of the
    #: pieces before it too), for the next piece
    narrow: pl.DataFrame | None = None

    def clear(self) -> None:
        """Let the rows go (written), keeping the frames' columns."""
        self.items, self.rollouts, self.quarantine = (
            self.items.clear(),
            self.rollouts.clear(),
            self.quarantine.clear(),
        )
        self.per_file, self.result_errors = self.per_file.clear(), self.result_errors.clear()
        self.narrow = None


@dataclass(frozen=True)
class PieceContext:
    """What the pieces of a large file read before tell the next one's normalization
    (``memkiln.io.large_file``): the file's format (the first piece's majority), the rollout
    fields that matter of the lines before (``transforms.pieces.fields_that_matter``), and
    the last timestamp of its items, carried forward over the next items without one."""

    format: str | None = None
    narrow: pl.DataFrame | None = None
    last_ts: datetime | None = None
    first: bool = False  # the first piece: its own lines decide the format


def normalize_chunks(
    con: duckdb.DuckDBPyConnection,
    chunks: list[tuple[int, bytes]],
    *,
    files: pl.DataFrame,
    extra_quarantine: pl.DataFrame | None = None,
    rules: RuleSet,
) -> Normalized:
    """Turn decompressed file bytes into redacted items and rollouts.

    ``files`` has ``fid, path`` for every chunk; ``con`` is only used as DuckDB's JSON parser
    (an in-memory connection will do).
    """
    return normalize_lines(
        con, split_lines(chunks), files=files, extra_quarantine=extra_quarantine, rules=rules
    )


def normalize_lines(
    con: duckdb.DuckDBPyConnection,
    lines: pl.DataFrame,
    *,
    files: pl.DataFrame,
    extra_quarantine: pl.DataFrame | None = None,
    rules: RuleSet,
    context: PieceContext | None = None,
) -> Normalized:
    """Turn the lines of a batch (``split_lines``) into redacted items and rollouts.

    With ``context``, the lines are a piece of one large file after others: its format is
    the context's, its session is built from the context's fields and its own, and its
    items' timestamps go on from the context's; the fields are handed on in ``narrow``.

    The lines are cleaned, classified and parsed in parts of at most ``PARSE_PART_BYTES``, so
    memory follows that size and the batch's output, not the largest file. A file's format is
    the majority of its lines, so when there are several parts, the parts are parsed a first
    time for the votes and the session fields (kept narrow), and a second time, once formats
    are known, for the items.
    """
    hits: Counter[str] = Counter()
    goods: list[pl.DataFrame | None] = []
    bads: list[pl.DataFrame] = [] if extra_quarantine is None else [extra_quarantine]
    counts: list[pl.DataFrame] = []
    votes: list[pl.DataFrame] = []
    narrow: list[pl.DataFrame] = []
    errors: list[pl.DataFrame] = [_no_result_errors()]
    parts = _byte_ranges(lines["nbytes"], PARSE_PART_BYTES)
    whole: pl.DataFrame | None = None  # the fields of a batch parsed in one part
    for offset, length in parts:
        # 2-3. clean (blobs, secrets), check which lines are JSON objects, quarantine the rest
        # 4. with every field of every line, parsed in the same pass as its validity
        good, fields, bad, n_lines, part_hits = _clean_and_classify(
            con, lines.slice(offset, length), rules=rules
        )
        hits.update(part_hits)
        bads.append(bad)
        counts.append(n_lines)
        votes.append(format_votes(fields.lazy()).collect(engine=POLARS_ENGINE))
        errors.append(_result_errors(fields))
        if len(parts) == 1:
            whole = fields
        else:
            narrow.append(rollout_fields(fields.lazy()).collect(engine=POLARS_ENGINE))
        del fields
        goods.append(good)
    del lines
    formats = formats_from_votes(pl.concat(votes).lazy()).collect(engine=POLARS_ENGINE)
    if context is not None and not context.first:
        formats = formats.with_columns(format=pl.lit(context.format, dtype=pl.String))

    # 5. normalize into items (part by part) and rollouts
    pieces: list[pl.DataFrame] = []
    for i, part in enumerate(goods):
        assert part is not None
        goods[i] = None  # let each part go once its items are built
        fields = whole if whole is not None else line_fields(con, part)
        whole = None
        items, item_hits = _items_of(con, fields, part, formats, rules=rules)
        hits.update(item_hits)
        pieces.append(items)
        if len(parts) == 1:
            narrow.append(rollout_fields(fields.lazy()).collect(engine=POLARS_ENGINE))
        del fields, part
    # a token cut by two tool outputs of a file that fell in two parts: neither half is kept
    joined, across = concat_across_parts(pieces, rules=rules) if pieces else (None, {})
    hits.update(across)
    del pieces
    items = (
        fill_timestamps(joined.lazy()).collect(engine=POLARS_ENGINE)
        if joined is not None
        else _no_items()
    )
    del joined
    if context is not None and context.last_ts is not None:
        items = items.with_columns(pl.col("ts").fill_null(context.last_ts))
    if context is not None and context.narrow is not None:
        narrow.insert(0, context.narrow)
    quarantine = pl.concat(bads, how="vertical_relaxed")
    n_lines = pl.concat(counts).group_by("fid").agg(pl.col("n_lines").sum())
    per_file = (
        files.join(formats, on="fid", how="left")
        .join(n_lines, on="fid", how="left")
        .join(
            quarantine.group_by("file_id").agg(n_quarantined=pl.len()).rename({"file_id": "fid"}),
            on="fid",
            how="left",
        )
        .with_columns(pl.col("n_lines", "n_quarantined").fill_null(0).cast(pl.Int64))
    )
    narrowed = pl.concat(narrow, how="vertical_relaxed")
    del narrow
    rollouts, rollout_hits = redact_rollouts(
        build_rollouts(
            narrowed.lazy(),
            items.lazy(),
            per_file.filter(pl.col("format").is_not_null()).lazy(),
        ).collect(engine=POLARS_ENGINE),
        rules=rules,
    )
    hits.update(rollout_hits)
    return Normalized(
        items,
        rollouts,
        quarantine,
        per_file,
        dict(hits),
        result_errors=pl.concat(errors),
        narrow=narrowed if context is not None else None,
    )


def _result_errors(fields: pl.DataFrame) -> pl.DataFrame:
    """``fid, line_no, is_error`` of the lines that say whether their tool result failed."""
    return (
        fields.filter(pl.col("m_is_error").is_not_null())
        .select("fid", "line_no", is_error=pl.col("m_is_error") == "true")
        .cast(_RESULT_ERROR_TYPES)
    )


def _no_result_errors() -> pl.DataFrame:
    return pl.DataFrame(schema=_RESULT_ERROR_TYPES)


def _byte_ranges(nbytes: pl.Series, limit: int) -> list[tuple[int, int]]:
    """``(offset, length)`` row ranges of consecutive lines holding about ``limit`` bytes each
    (a longer line is a part alone); one range for a batch under the limit, none for none."""
    if nbytes.is_empty():
        return [(0, 0)]
    part = (nbytes.cum_sum() - 1) // limit
    bounds = (
        pl.DataFrame({"part": part})
        .with_row_index("row")
        .group_by("part", maintain_order=True)
        .agg(offset=pl.col("row").min(), length=pl.len())
    )
    return [(int(o), int(n)) for o, n in bounds.select("offset", "length").iter_rows()]


def _clean_and_classify(
    con: duckdb.DuckDBPyConnection, lines: pl.DataFrame, *, rules: RuleSet
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """Clean lines (blobs -> notes) and sort them: ``(good, fields of the good lines,
    quarantined, lines per file, hits per rule)``; good lines are JSON objects (DuckDB's
    parser, which reads every field of a line and its validity in one parse). The good lines
    are not redacted yet (their items and rollouts are, once built); the quarantined ones are,
    and the hits are theirs."""
    cleaned = clean_lines(lines.lazy(), rules=rules).collect(engine=POLARS_ENGINE)
    fields = _fields_and_validity(con, cleaned)
    validity = fields.select("fid", "line_no", "valid")
    cleaned, validity, mended = _mend_surrogates(con, cleaned, validity)
    if mended.height:  # their fields, parsed again once mended
        fields = fields.update(
            _fields_and_validity(con, mended), on=["fid", "line_no"], include_nulls=True
        )
    classified = classify_lines(
        cleaned.lazy().join(validity.lazy(), on=["fid", "line_no"], how="left")
    ).collect(engine=POLARS_ENGINE)
    del cleaned, validity
    is_good = pl.col("reason").is_null()
    good = classified.filter(is_good).select("fid", "line_no", "line", "omitted_bytes")
    bad = classified.filter(~is_good)
    excerpt, hits = quarantine_excerpts(bad, rules=rules)
    bad = bad.select(
        file_id="fid",
        line_no="line_no",
        reason="reason",
        detail=pl.lit(None, dtype=pl.String),
        excerpt=excerpt,
        bytes="nbytes",
    )
    fields = fields.drop("valid")
    if good.height < fields.height:  # rarely: most batches have no line to quarantine
        fields = fields.join(good.select("fid", "line_no"), on=["fid", "line_no"], how="semi")
    n_lines = classified.group_by("fid").agg(n_lines=pl.len().cast(pl.Int64))
    return good, fields, bad, n_lines, hits


def line_fields(con: duckdb.DuckDBPyConnection, good: pl.DataFrame) -> pl.DataFrame:
    """Every field the formats use, of JSON-object lines (``fid, line_no, line``), parsed once
    by DuckDB's JSON reader."""
    return _fields_and_validity(con, good).drop("valid")


def _fields_and_validity(con: duckdb.DuckDBPyConnection, lines: pl.DataFrame) -> pl.DataFrame:
    """:func:`line_fields` of any lines, with ``valid`` (the line is valid JSON): one parse."""
    batch_lines = lines.select("fid", "line_no", "line").to_arrow(compat_level=ARROW_OUT)
    with registered(con, batch_lines=batch_lines):
        return fetch_pl(con, sql("extract_line_fields"))


def _items_of(
    con: duckdb.DuckDBPyConnection,
    fields: pl.DataFrame,
    good: pl.DataFrame,
    formats: pl.DataFrame,
    *,
    rules: RuleSet,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The redacted items of some lines, timestamps not yet carried forward, and the hits per
    rule of their redaction."""
    fields = fields.join(formats, on="fid", how="left").join(good, on=["fid", "line_no"])
    fields = _strip_payloads(con, fields)
    blocks = _content_blocks(con, fields)
    built = build_items(fields.lazy(), blocks.lazy(), fill_timestamps=False)
    items, hits = redact_items(built.collect(engine=POLARS_ENGINE), rules=rules)
    # a token cut in two by consecutive tool outputs: neither half is kept
    items, across = redact_across_frame(items, rules=rules)
    return items, dict(Counter(hits) + Counter(across))


def _strip_payloads(con: duckdb.DuckDBPyConnection, fields: pl.DataFrame) -> pl.DataFrame:
    """``fields`` with each ``line`` cut of the fields its item holds as text, so that
    ``payload_json`` does not store a tool output (or a message) a second time."""
    paths = payload_text_paths(fields.lazy()).collect(engine=POLARS_ENGINE)
    batch_payloads = pl.DataFrame(
        [fields["line"], paths["text_path"], paths["text_path2"]]
    ).to_arrow(compat_level=ARROW_OUT)
    with registered(con, batch_payloads=batch_payloads):
        stripped = con.sql(sql("strip_payloads")).to_arrow_table()
    line = pl.Series("line", stripped.column("line"), dtype=pl.String)
    assert line.len() == fields.height
    return fields.with_columns(line)


def _item_bytes(items: pl.DataFrame) -> pl.Series:
    """About how many bytes each item holds (its two long texts)."""
    return (
        items.select(
            pl.col("text").str.len_bytes().fill_null(0)
            + pl.col("payload_json").str.len_bytes().fill_null(0)
        )
        .to_series()
        .cast(pl.Int64)
    )


def _no_items() -> pl.DataFrame:
    return pl.DataFrame(schema=ITEM_COLUMNS)


def parse_lines(
    con: duckdb.DuckDBPyConnection, good: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Parse JSON-object lines (``fid, line_no, line, omitted_bytes``) into line fields,
    content blocks and per-file formats, with DuckDB's JSON reader."""
    fields = line_fields(con, good)
    formats = detect_formats(fields.lazy()).collect(engine=POLARS_ENGINE)
    fields = fields.join(formats, on="fid", how="left").join(
        good.select("fid", "line_no", "line", "omitted_bytes"), on=["fid", "line_no"]
    )
    return fields, _content_blocks(con, fields), formats


def _content_blocks(con: duckdb.DuckDBPyConnection, fields: pl.DataFrame) -> pl.DataFrame:
    """The content blocks of parsed line fields (``extract_content_blocks``)."""
    content = content_arrays(fields.lazy()).collect(engine=POLARS_ENGINE)
    with registered(con, batch_content=content.to_arrow(compat_level=ARROW_OUT)):
        return fetch_pl(con, sql("extract_content_blocks"))


def _mend_surrogates(
    con: duckdb.DuckDBPyConnection, cleaned: pl.DataFrame, validity: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Lines DuckDB rejects only for a lone surrogate escape (``"\\ud83d"``, a string cut
    through an emoji by a JavaScript writer) are mended and checked again: ``cleaned`` and
    ``validity`` updated, and the mended lines now valid (``fid, line_no, line``). Rare: a
    Python loop over those lines only."""
    suspects = (
        cleaned.join(validity.filter(~pl.col("valid")), on=["fid", "line_no"], how="semi")
        .filter(pl.col("line").str.contains(SURROGATE_ESCAPE))
        .select("fid", "line_no", "line")
    )
    if not suspects.height:
        return cleaned, validity, suspects
    mended = suspects.with_columns(
        pl.Series("line", [mend_lone_surrogates(t) for t in suspects["line"]], dtype=pl.String)
    )
    with registered(con, batch_mended=mended.to_arrow(compat_level=ARROW_OUT)):
        ok = fetch_pl(con, sql("lines_mended_valid"))
    if not ok.height:
        return cleaned, validity, ok
    keys = ["fid", "line_no"]
    cleaned = cleaned.update(ok, on=keys)
    validity = validity.update(ok.select(*keys, valid=pl.lit(True)), on=keys)
    return cleaned, validity, ok


def looks_binary(data: bytes) -> bool:
    """NUL bytes near the start of a file that does not start like JSON lines. A session
    file whose tail was zero-filled by a crash starts with ``{``: its good lines are kept and
    the damaged one is quarantined."""
    head = data[:65536]
    if b"\x00" not in head:
        return False
    return not head.removeprefix(UTF8_BOM).lstrip().startswith(b"{")


def _file_quarantine(
    fid: int,
    reason: str,
    detail: str | None,
    size: int,
    *,
    rules: RuleSet,
    line_no: int | None = None,
) -> dict[str, object]:
    return {
        "file_id": fid,
        "line_no": line_no,
        "reason": reason,
        "detail": redact_text(detail, rules=rules)[:QUARANTINE_EXCERPT_CHARS] if detail else None,
        "excerpt": None,
        "bytes": size,
    }


def _write(
    con: duckdb.DuckDBPyConnection,
    *,
    released: list[int],
    files: pl.DataFrame,
    rollouts: pl.DataFrame,
    items: pl.DataFrame,
    tool_calls: pl.DataFrame,
    quarantine: pl.DataFrame,
    run_id: str,
    hits: dict[str, int],
) -> None:
    at = now()
    params = {"fids": files["file_id"].to_list(), "run_id": run_id, "at": at}
    frames = {
        "b_files": files,
        "b_rollouts": rollouts,
        "b_quarantine": quarantine,
        "b_tool_calls": tool_calls,
    }
    with transaction(con, **frames):
        if released:  # files that are gone, whose sessions this batch takes over
            for table in ("items", "tool_calls", "rollouts"):
                execute(con, f"delete_file_{table}", fids=released)
            con.execute(sql("release_files"), {"fids": released, "run_id": run_id, "at": at})
        for table in ("items", "rollouts", "tool_calls", "quarantine"):
            execute(con, f"delete_file_{table}", fids=params["fids"])
        con.execute(sql("upsert_files"), {"run_id": run_id, "at": at})
        con.execute(sql("insert_rollouts"), {"run_id": run_id, "at": at})
        insert_items(con, items)
        con.execute(sql("insert_tool_calls"))
        con.execute(sql("insert_quarantine"), {"run_id": run_id, "at": at})
        for rule_id, n in hits.items():
            execute(con, "add_redaction_hits", run_id=run_id, rule_id=rule_id, hits=n)


def insert_items(con: duckdb.DuckDBPyConnection, items: pl.DataFrame) -> None:
    """Insert items in slices of about PART_BYTES: one Arrow copy of a slice at a time."""
    for offset, length in _byte_ranges(_item_bytes(items), PART_BYTES):
        b_items = items.slice(offset, length).to_arrow(compat_level=ARROW_OUT)
        with registered(con, b_items=b_items):
            con.execute(sql("insert_items"))
