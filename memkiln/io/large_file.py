"""A session file of more than ``WHOLE_FILE_BYTES`` of lines: read, normalized and written
in pieces by the writer, so that memory holds one piece at a time whatever the file holds.

A batch that meets such a file leaves it out (``loader.prepare_batch``); the writer, once it
has written the batch, reads the file from its start in pieces of about
``FILE_PIECE_BYTES`` (``archive.read_pieces``) and writes each piece's items, tool calls and
quarantined lines in a transaction of its own, then the file's session and fingerprint in a
last one. What a piece needs of the pieces before it is carried forward, small:

- the file's format (the first piece's majority: at least 16 MiB of lines);
- the line numbers and item numbers (``seq``) go on from the piece before;
- the rollout fields that decide the session (``pieces.fields_that_matter``), so each piece
  names the same session, built from every line before it;
- the last timestamp, carried over items without one;
- the tool calls of the piece before without an output, paired when it comes.

The session's counts and times are summed over the pieces (``pieces.merged_rollout``); a
duplicate session is found with the first piece and its items are not written; a session
whose times turn out unusable, or a file that holds none, loses its items in the last
transaction. Until that one commits, the file's row says ``incomplete`` with no fingerprint:
a run stopped in between leaves the file to be read again, from its start, by the next.

Past ``MAX_FILE_BYTES`` of lines the rest is not read (``file_too_large``), and past
``MAX_BAD_LINES`` quarantined lines neither (``too_many_bad_lines``): a compressed stream of
garbage costs a bounded time and stores a bounded number of rows.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from datetime import datetime
from typing import NamedTuple

import duckdb
import polars as pl

from memkiln.constants import (
    FILE_PIECE_BYTES,
    MAX_BAD_LINES,
    MAX_FILE_BYTES,
    MAX_LINE_BYTES,
    POLARS_ENGINE,
)
from memkiln.io.archive import FilePiece, FileStat, path_key, read_pieces, shown_path
from memkiln.io.loader import (
    FILES_SCHEMA,
    QUARANTINE_SCHEMA,
    BatchResult,
    PieceContext,
    _file_quarantine,
    holders,
    insert_items,
    json_parser,
    looks_binary,
    normalize_lines,
)
from memkiln.io.store import execute, fetch_pl, now, sql, transaction
from memkiln.transforms.lines import split_lines
from memkiln.transforms.normalize import ITEM_COLUMNS
from memkiln.transforms.pieces import fields_that_matter, merged_rollout, unanswered_calls
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.redact_across import TOOL_OUTPUT_TYPES, redact_across_parts
from memkiln.transforms.settle import (
    FAILED_STATUSES,
    file_statuses,
    number_items,
    set_aside,
    settle_duplicates,
    settle_times,
    with_unrecognized,
)
from memkiln.transforms.tool_calls import TOOL_CALL_COLUMNS, build_tool_calls, error_line_of

#: The status of a file whose pieces are being written (no fingerprint yet: read again).
INCOMPLETE = "incomplete"
#: Tool calls without an output carried from piece to piece at most (the latest): their
#: rows are written again when their output comes.
MAX_WAITING_CALLS = 1000


class Rewritten(NamedTuple):
    """A tool output written with an earlier piece and redacted further by the next one:
    its item's ``seq``, its call's id, its text as written and as it is now."""

    seq: int
    call_id: str | None
    old: str
    new: str


def ingest_large_files(
    con: duckdb.DuckDBPyConnection, large: pl.DataFrame, *, run_id: str, rules: RuleSet
) -> BatchResult:
    """Read and write each file of ``large`` (``loader.LARGE_SCHEMA``) in pieces."""
    result = BatchResult()
    parser = json_parser()
    try:
        for fid, raw_path, size, mtime in large.iter_rows():
            stat = FileStat(os.fsdecode(raw_path), size, mtime)
            result.add(LargeFile(con, parser, stat, fid, run_id=run_id, rules=rules).ingest())
    finally:
        parser.close()
    return result


class LargeFile:
    """One large file's ingest: :meth:`ingest` reads it piece by piece; the attributes are
    what is carried from one piece to the next."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        parser: duckdb.DuckDBPyConnection,
        stat: FileStat,
        fid: int,
        *,
        run_id: str,
        rules: RuleSet,
    ) -> None:
        self.con, self.parser, self.stat, self.fid = con, parser, stat, fid
        self.run_id, self.rules = run_id, rules
        self.path = shown_path(stat.path)
        self.stored_path = redact_text(self.path, rules=rules)
        self.one = pl.DataFrame({"fid": [fid], "path": [self.path]})
        self.hasher = hashlib.sha256()
        self.context = PieceContext(first=True)
        self.format: str | None = None
        self.session: pl.DataFrame | None = None  # the session as the pieces so far make it
        self.rollout_id: str | None = None
        self.held = pl.DataFrame(schema={"rollout_id": pl.String, "holder": pl.Int64})
        self.released: list[int] = []
        self.kept = False  # its session is this file's (not a duplicate)
        self.next_seq = 0
        self.waiting = pl.DataFrame()  # tool calls without an output yet
        self.n_lines = self.n_quarantined = self.n_items = self.bytes_read = 0
        self.quarantined: list[pl.DataFrame] = []  # line_no, reason, detail of what was
        self.unwritten = pl.DataFrame(schema=QUARANTINE_SCHEMA)  # when nothing could be read
        self.hits: Counter[str] = Counter()
        self.read_error: str | None = None
        self.binary = False
        self.stopped_unknown = False  # of no known format, read no further than its first piece
        self.begun = False  # a piece is written: the file's earlier rows are gone
        self.last_output: pl.DataFrame | None = None  # the last tool output written

    def ingest(self) -> BatchResult:
        pieces = read_pieces(self.stat, piece_bytes=FILE_PIECE_BYTES, max_bytes=MAX_FILE_BYTES)
        try:
            for piece in pieces:
                if not self._piece(piece):
                    break
        finally:
            pieces.close()
        return self._finish()

    def _piece(self, piece: FilePiece) -> bool:
        """Normalize and write one piece; false when the rest of the file is not read."""
        self.hasher.update(piece.data)
        self.bytes_read += len(piece.data)
        extra = [
            _file_quarantine(
                self.fid,
                "line_too_long",
                f"{long.nbytes} bytes, over the limit of {MAX_LINE_BYTES}",
                long.nbytes,
                rules=self.rules,
                line_no=long.line_no,
            )
            for long in piece.long_lines
        ]
        if piece.error:
            self.read_error = piece.error
            extra.append(
                _file_quarantine(
                    self.fid, piece.error, piece.detail, self.stat.size, rules=self.rules
                )
            )
        data = piece.data
        if self.context.first and looks_binary(data):
            self.binary = True
            extra.append(
                _file_quarantine(
                    self.fid, "binary_file", "NUL bytes in the file", len(data), rules=self.rules
                )
            )
            data = b""
        if self.context.first and piece.last and not self.bytes_read and piece.error:
            # nothing could be read (gone, unreadable, not a stream): no piece is written
            self.unwritten = pl.DataFrame(extra, schema=QUARANTINE_SCHEMA)
            return False
        lines = split_lines([(self.fid, data)]).with_columns(
            pl.col("line_no") + (piece.first_line - 1)
        )
        norm = normalize_lines(
            self.parser,
            lines,
            files=self.one,
            extra_quarantine=pl.DataFrame(extra, schema=QUARANTINE_SCHEMA),
            rules=self.rules,
            context=self.context,
        )
        last_line = piece.first_line + lines.height - 1
        del lines, data
        self.hits.update(norm.hits)
        more = not (self.binary or piece.last)
        if self.context.first:
            self.format = norm.per_file["format"][0] if norm.per_file.height else None
            # lines of no known format: nothing after them would be stored either
            more = more and self.format is not None
            self.stopped_unknown = self.format is None and not (self.binary or piece.last)
        self.n_lines += int(norm.per_file["n_lines"].sum())

        # quarantined lines, at most MAX_BAD_LINES of them in all
        quarantine = norm.quarantine
        room = MAX_BAD_LINES - self.n_quarantined
        if quarantine.height > room:
            detail = (
                f"more than {MAX_BAD_LINES} lines quarantined (the first {MAX_BAD_LINES} are "
                f"listed): the lines after line {last_line} are not read"
            )
            stop = _file_quarantine(
                self.fid, "too_many_bad_lines", detail, self.stat.size, rules=self.rules
            )
            quarantine = pl.concat(
                [
                    quarantine.sort("line_no", nulls_last=False).head(max(room, 0)),
                    pl.DataFrame([stop], schema=QUARANTINE_SCHEMA),
                ],
                how="vertical_relaxed",
            )
            more = False
        self.n_quarantined += quarantine.height

        # the session: the first piece that names it decides whether it is this file's
        rollouts = norm.rollouts
        if rollouts.height:
            if self.rollout_id is None:
                self.rollout_id = str(rollouts["rollout_id"][0])
                self.held, self.released = holders(self.con, [self.fid], [self.rollout_id])
                self.kept = self.held.is_empty()
            else:  # the same session, whatever a later header says
                rollouts = rollouts.with_columns(rollout_id=pl.lit(self.rollout_id))
            rows = rollouts if self.session is None else pl.concat([self.session, rollouts])
            self.session = merged_rollout(rows, n_lines=0, n_quarantined=0)
        if self.kept and rollouts.height:
            items = number_items(norm.items, rollouts).with_columns(pl.col("seq") + self.next_seq)
        else:
            items = pl.DataFrame(schema=ITEM_COLUMNS).with_columns(
                rollout_id=pl.lit(None, dtype=pl.String), seq=pl.lit(None, dtype=pl.Int32)
            )
        self.next_seq += items.height
        self.n_items += items.height
        # a token cut by the last tool output of the pieces before and the first of this one
        items, before, across = self._join_last_output(items)
        self.hits.update(across)
        hits = dict(Counter(norm.hits) + Counter(across))
        with_waiting = (
            pl.concat([self.waiting, items], how="vertical_relaxed")
            if self.waiting.height
            else items
        )
        tool_calls = build_tool_calls(
            with_waiting.lazy(), result_errors=norm.result_errors.lazy()
        ).collect(engine=POLARS_ENGINE)
        replaced = self.waiting["seq"].to_list() if self.waiting.height else []
        session = (
            merged_rollout(self.session, n_lines=self.n_lines, n_quarantined=self.n_quarantined)
            if self.kept and self.session is not None
            else None
        )
        self._write_piece(items, tool_calls, quarantine, replaced, hits, session, before)
        self.waiting = unanswered_calls(with_waiting, tool_calls).tail(MAX_WAITING_CALLS)
        self.quarantined.append(quarantine.select("line_no", "reason", "detail"))
        last_ts = norm.items["ts"].drop_nulls()
        narrow = norm.narrow if norm.narrow is not None else self.context.narrow
        self.context = PieceContext(
            format=self.format,
            narrow=fields_that_matter(narrow) if narrow is not None else None,
            last_ts=_last(last_ts, self.context.last_ts),
        )
        return more

    def _join_last_output(
        self, items: pl.DataFrame
    ) -> tuple[pl.DataFrame, Rewritten | None, dict[str, int]]:
        """``items`` with a token cut by the last tool output of the pieces before (already
        written) and the first of this piece redacted on both sides (``redact_across_parts``):
        the items, the written output's new text if it changed, the hits. What this piece's
        last tool output is, is carried to the next."""
        outputs = items.filter(
            pl.col("item_type").is_in(list(TOOL_OUTPUT_TYPES)) & pl.col("text").is_not_null()
        )
        before: Rewritten | None = None
        hits: dict[str, int] = {}
        if self.last_output is not None and outputs.height:
            last = self.last_output
            both = pl.concat(
                [
                    last.with_columns(__part=pl.lit(0, dtype=pl.Int32)),
                    items.with_columns(__part=pl.lit(1, dtype=pl.Int32)),
                ],
                how="vertical_relaxed",
            )
            both, hits = redact_across_parts(both, rules=self.rules, part="__part", order=("seq",))
            if hits:
                text, old = both["text"][0], last["text"][0]
                if text != old:
                    before = Rewritten(int(last["seq"][0]), last["call_id"][0], old, text)
                items = both.slice(1).drop("__part")
                outputs = items.filter(
                    pl.col("item_type").is_in(list(TOOL_OUTPUT_TYPES))
                    & pl.col("text").is_not_null()
                )
        if outputs.height:
            self.last_output = outputs.tail(1)
        return items, before, hits

    def _write_piece(
        self,
        items: pl.DataFrame,
        tool_calls: pl.DataFrame,
        quarantine: pl.DataFrame,
        replaced: list[int],
        hits: dict[str, int],
        session: pl.DataFrame | None,
        before: Rewritten | None = None,
    ) -> None:
        at = now()
        con = self.con
        quarantine = quarantine.with_columns(path=pl.lit(self.stored_path, dtype=pl.String))
        frames = {"b_tool_calls": tool_calls.cast(TOOL_CALL_COLUMNS), "b_quarantine": quarantine}
        if session is not None:
            frames["b_rollouts"] = session
        # the file is incomplete until the last transaction, and holds the session so far
        frames["b_files"] = self._files_row(
            INCOMPLETE,
            mtime_ns=-1,
            content_hash=None,
            rollout_id=None if session is None else str(session["rollout_id"][0]),
        )
        with transaction(con, **frames):
            if not self.begun:  # the file's earlier rows go
                for table in ("items", "rollouts", "tool_calls", "quarantine"):
                    execute(con, f"delete_file_{table}", fids=[self.fid])
            con.execute(sql("upsert_files"), {"run_id": self.run_id, "at": at})
            if self.released:  # files gone whose session this file takes over
                for table in ("items", "tool_calls", "rollouts"):
                    execute(con, f"delete_file_{table}", fids=self.released)
                execute(con, "release_files", fids=self.released, run_id=self.run_id, at=at)
                self.released = []
            if replaced:  # calls of the piece before, paired with an output of this one
                execute(con, "delete_file_tool_calls_at", fid=self.fid, seqs=replaced)
            if session is not None:  # every item has its session at every commit
                execute(con, "delete_file_rollouts", fids=[self.fid])
                con.execute(sql("insert_rollouts"), {"run_id": self.run_id, "at": at})
            insert_items(con, items)
            if before is not None:  # the pieces' before last tool output, redacted further
                execute(con, "update_item_text", fid=self.fid, seq=before.seq, text=before.new)
                if before.call_id is not None:  # and its call's error line, if it showed it
                    execute(con, "update_tool_call_error_line", fid=self.fid,
                            call_id=before.call_id, old=before.old, new=before.new,
                            line=error_line_of(before.new))  # fmt: skip
            con.execute(sql("insert_tool_calls"))
            con.execute(sql("insert_quarantine"), {"run_id": self.run_id, "at": at})
            for rule_id, n in hits.items():
                execute(con, "add_redaction_hits", run_id=self.run_id, rule_id=rule_id, hits=n)
        self.begun = True

    def _files_row(
        self,
        status: str,
        *,
        mtime_ns: int,
        content_hash: str | None,
        rollout_id: str | None = None,
    ) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {
                    "file_id": self.fid,
                    "path_key": path_key(self.stat.path),
                    "path": self.stored_path,
                    "compression": self.stat.compression,
                    "size": self.stat.size,
                    "mtime_ns": mtime_ns,
                    "content_hash": content_hash,
                    "status": status,
                    "format": None,
                    "rollout_id": rollout_id,
                    "lines": 0,
                    "quarantined": 0,
                }
            ],
            schema={
                **FILES_SCHEMA,
                "format": pl.String,
                "rollout_id": pl.String,
                "lines": pl.Int64,
                "quarantined": pl.Int64,
            },
        )

    def _finish(self) -> BatchResult:
        """The file's session, status and fingerprint, in the last transaction."""
        con = self.con
        status = "ok"
        if self.binary:
            status = "binary"
        elif not self.bytes_read and self.read_error == "unreadable_file":
            status = "unreadable"
        elif not self.bytes_read and self.read_error:
            status = "corrupt"
        elif self.read_error:
            status = "partial"
        files = self._files_row(
            status,
            mtime_ns=self.stat.mtime_ns,
            content_hash=self.hasher.hexdigest() if self.bytes_read else None,
        ).select(FILES_SCHEMA.keys())
        per_file = pl.DataFrame(
            {
                "fid": [self.fid],
                "path": [self.path],
                "format": [self.format],
                "n_lines": [self.n_lines],
                "n_quarantined": [self.n_quarantined],
            },
            schema={
                "fid": pl.Int64,
                "path": pl.String,
                "format": pl.String,
                "n_lines": pl.Int64,
                "n_quarantined": pl.Int64,
            },
        )
        rollouts = (
            merged_rollout(self.session, n_lines=self.n_lines, n_quarantined=self.n_quarantined)
            if self.session is not None
            else pl.DataFrame(schema={"fid": pl.Int64, "rollout_id": pl.String})
        )
        quarantine = pl.DataFrame(schema=QUARANTINE_SCHEMA)
        if self.rollout_id is not None:
            rollouts, quarantine, dup = settle_duplicates(rollouts, quarantine, self.held)
            rollouts, quarantine, timeless = settle_times(rollouts, quarantine, now=now())
        else:
            dup = timeless = rollouts.select("fid")
        files = file_statuses(files, per_file, rollouts, dup, timeless)
        quarantine = with_unrecognized(quarantine, files)
        if self.stopped_unknown:  # say that the rest of the file was not read
            quarantine = quarantine.with_columns(
                detail=pl.when(pl.col("reason") == "unrecognized_format")
                .then(
                    pl.col("detail")
                    + pl.lit(f"; its first {self.n_lines} lines read, the rest not")
                )
                .otherwise(pl.col("detail"))
            )
        final_status = str(files["status"][0])
        quarantine = pl.concat(
            [self.unwritten, quarantine.drop("path")], how="vertical_relaxed"
        ).with_columns(path=pl.lit(self.stored_path, dtype=pl.String))
        seen = pl.concat(
            [*self.quarantined, quarantine.select("line_no", "reason", "detail")],
            how="vertical_relaxed",
        ).with_columns(path=pl.lit(self.stored_path, dtype=pl.String))
        self.n_quarantined += quarantine.height
        # a file stored before that cannot be opened now keeps what was stored
        if final_status == "unreadable" and not self.begun:
            stored = fetch_pl(con, sql("files_stored"), {"fids": [self.fid]})
            if stored.height:
                files = files.clear()
        at = now()
        frames = {
            "b_files": files,
            "b_rollouts": rollouts,
            "b_quarantine": quarantine.select(
                "file_id", "path", "line_no", "reason", "detail", "excerpt", "bytes"
            ),
        }
        kept = rollouts.height > 0
        with transaction(con, **frames):
            if not self.begun and files.height:
                for table in ("items", "rollouts", "tool_calls", "quarantine"):
                    execute(con, f"delete_file_{table}", fids=[self.fid])
            if self.begun:  # the session as the last piece left it, and its items if not kept
                for table in ("rollouts",) if kept else ("rollouts", "items", "tool_calls"):
                    execute(con, f"delete_file_{table}", fids=[self.fid])
            con.execute(sql("upsert_files"), {"run_id": self.run_id, "at": at})
            if kept:
                con.execute(sql("insert_rollouts"), {"run_id": self.run_id, "at": at})
            con.execute(sql("insert_quarantine"), {"run_id": self.run_id, "at": at})
        return BatchResult(
            files=1,
            bytes_read=self.bytes_read,
            rollouts=int(kept),
            items=self.n_items if kept else 0,
            quarantined=self.n_quarantined,
            failed_files=int(final_status in FAILED_STATUSES),
            hits=dict(self.hits),
            set_aside=set_aside(seen),
            statuses={final_status: 1},
        )


def _last(values: pl.Series, default: datetime | None) -> datetime | None:
    last: datetime | None = values[-1] if values.len() else default
    return last
