"""From raw file bytes to a frame of lines, and the per-line decisions before parsing.

``split_lines`` turns a batch of decompressed files into one Arrow-backed frame (one row per
line) without a Python loop over lines. ``clean_lines`` replaces blobs by size notes.
``classify_lines`` decides, from the JSON validity DuckDB reports, which lines are items and
which go to quarantine, with a fixed reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from memkiln.constants import BLOB_MIN_CHARS, QUARANTINE_EXCERPT_CHARS
from memkiln.transforms.redact import (
    RuleSet,
    redact_counted_series,
    redact_expr,
    rewrite_rows,
    unescape_expr,
)
from memkiln.transforms.states import QuarantineReason

#: A JSON string that is only a (possibly data-URL prefixed) base64 blob.
BLOB_PATTERN = (
    r'"(?:data:[A-Za-z0-9/+.\-]+;base64,)?[A-Za-z0-9+/=_\-]{' + str(BLOB_MIN_CHARS) + r',}"'
)
BLOB_NOTE = '"[omitted blob]"'
#: Keys whose values name a session, its project or its place (a working directory made only of
#: the base64 alphabet, 512 characters or more, is still a directory): never rewritten as blobs.
IDENTITY_KEYS = (
    "cwd",
    "repository_url",
    "id",
    "session_id",
    "sessionId",
    "branch",
    "gitBranch",
    "commit_hash",
    "forked_from_id",
    "parent_thread_id",
)
#: Such a key and the opening quote of its value (``${1}``), for the value to be marked.
_IDENTITY_VALUE = r'("(?:' + "|".join(IDENTITY_KEYS) + r')"\s*:\s*")'
#: What marks an identity value while blobs are replaced (a JSON string cannot hold it).
_KEEP_MARK = "\x00\x01memkiln-keep\x01"

LINE_SCHEMA = {
    "fid": pl.Int64,
    "line_no": pl.Int32,
    "line": pl.String,
    "lossy": pl.String,
    "nbytes": pl.Int64,
    "unterminated": pl.Boolean,
}


UTF8_BOM = b"\xef\xbb\xbf"


def split_lines(chunks: Sequence[tuple[int, bytes]]) -> pl.DataFrame:
    """One row per line of every ``(fid, data)`` chunk.

    ``line`` is null where the bytes are not valid UTF-8; ``lossy`` then holds them decoded
    with replacement characters (for the quarantine excerpt). ``unterminated`` marks the last line
    of a file that does not end with a newline (a line still being written, or cut off).
    A UTF-8 byte order mark at the start of a file is dropped. Blank lines are kept here (they
    count for line numbers) and dropped by ``classify_lines``.
    """
    fids: list[int] = []
    ends: list[int] = []  # where each file's bytes end in the joined buffer
    unterminated_fids: list[int] = []
    pieces: list[bytes] = []
    end = 0
    for fid, data in chunks:
        if data.startswith(UTF8_BOM):  # written by some Windows editors and tools
            data = data[len(UTF8_BOM) :]
        if not data:
            continue
        if not data.endswith(b"\n"):
            unterminated_fids.append(fid)
            data += b"\n"
        end += len(data)
        fids.append(fid)
        ends.append(end)
        pieces.append(data)
    if not pieces:
        return pl.DataFrame(schema=LINE_SCHEMA)
    buf = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    del pieces
    # the bytes as one Arrow value without a copy (a large file is not held twice)
    whole = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        1,
        [None, pa.array([0, len(buf)], pa.int64()).buffers()[1], pa.py_buffer(buf)],
    )
    raw = pc.split_pattern(whole, b"\n").flatten()
    del whole, buf
    counts = _lines_per_file(raw, ends)
    raw = raw.slice(0, len(raw) - 1)  # the empty piece after the final newline
    binary = pl.Series("raw", raw, dtype=pl.Binary)
    text, lossy = _decode_utf8(binary)
    frame = pl.DataFrame({"fid": fids, "n": counts}, schema={"fid": pl.Int64, "n": pl.Int64})
    fid_col = frame.select(pl.col("fid").repeat_by("n")).explode("fid").to_series()
    lines = pl.DataFrame(
        {"fid": fid_col, "line": text, "lossy": lossy, "nbytes": binary.bin.size()}
    )
    # CRLF files are rare: stripping copies every line, so only when one needs it
    line = pl.col("line")
    if text.str.ends_with("\r").any():
        line = line.str.strip_suffix("\r")
    return (
        lines.with_columns(
            line_no=(pl.int_range(pl.len(), dtype=pl.Int32).over("fid") + 1),
        )
        .with_columns(
            unterminated=pl.col("fid").is_in(unterminated_fids)
            & (pl.col("line_no") == pl.col("line_no").max().over("fid")),
            line=line,
            nbytes=pl.col("nbytes").cast(pl.Int64),
        )
        .select(LINE_SCHEMA.keys())
    )


def _lines_per_file(pieces: pa.LargeBinaryArray, ends: list[int]) -> list[int]:
    """How many of ``pieces`` (the buffer split at its newlines) start in each file, the files
    ending at ``ends`` in the buffer: piece ``k`` starts at its offset among the pieces plus the
    ``k`` newlines cut before it (no second scan of the bytes for newlines)."""
    offsets = pl.Series(
        pa.Array.from_buffers(
            pa.int64(), len(pieces), [None, pieces.buffers()[1]], offset=pieces.offset
        ),
        dtype=pl.Int64,
    )
    starts = offsets - offsets[0] + pl.int_range(len(pieces), eager=True, dtype=pl.Int64)
    first_after = starts.search_sorted(pl.Series(ends, dtype=pl.Int64), side="left")
    counts = first_after.cast(pl.Int64).diff(null_behavior="ignore").fill_null(first_after[0])
    return [int(n) for n in counts]


def _decode_utf8(binary: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Decode every line: ``(line, lossy)``. Only when some line is not UTF-8 is there a
    Python loop, and then ``line`` is null and ``lossy`` set for those lines."""
    try:
        return binary.cast(pl.String).rename("line"), pl.Series(
            "lossy", [None] * len(binary), dtype=pl.String
        )
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError):
        pass
    decoded: list[str | None] = []
    lossy: list[str | None] = []
    for value in binary.to_list():
        try:
            decoded.append(value.decode("utf-8"))
            lossy.append(None)
        except UnicodeDecodeError:
            decoded.append(None)
            lossy.append(value[:4096].decode("utf-8", errors="replace"))
    return pl.Series("line", decoded, dtype=pl.String), pl.Series("lossy", lossy, dtype=pl.String)


def clean_lines(lf: pl.LazyFrame, *, rules: RuleSet) -> pl.LazyFrame:
    """Replace base64 blobs by a note, in the ``line`` column, and redact ``lossy``.

    Adds ``omitted_bytes`` (bytes removed as blobs). A valid JSON line stays valid. The line
    itself is not redacted here, nor its JSON escapes decoded: it is only parsed, in memory,
    and every part of it that is stored is decoded and redacted once parsed
    (``normalize.redact_items``, ``normalize.redact_rollouts``, and the quarantined lines
    before their excerpt is cut). ``lossy`` (a line that is not valid UTF-8, quarantined as it
    is) is redacted here.
    """
    # only the lines holding a blob are rewritten (a replace_all writes every line again)
    without_blobs = pl.col("line").map_batches(
        _without_blob_rows, return_dtype=pl.String, is_elementwise=True
    )
    return (
        lf.with_columns(without_blobs=without_blobs)
        .with_columns(
            omitted_bytes=(
                pl.col("line").str.len_bytes() - pl.col("without_blobs").str.len_bytes()
            ).cast(pl.Int32),
            lossy=_redact_lossy(pl.col("lossy"), rules=rules),
        )
        .with_columns(line=pl.col("without_blobs"))
        .drop("without_blobs")
    )


def _without_blob_rows(lines: pl.Series) -> pl.Series:
    """``lines`` with every blob replaced by its note, only the rows holding one rewritten.
    The value of an identity key (``IDENTITY_KEYS``) is marked first, so it never matches."""
    return rewrite_rows(
        lines,
        lines.str.contains(BLOB_PATTERN),
        lambda rows: (
            rows.str.replace_all(_IDENTITY_VALUE, "${1}" + _KEEP_MARK)
            .str.replace_all(BLOB_PATTERN, BLOB_NOTE)
            .str.replace_all(_KEEP_MARK, "", literal=True)
        ),
    )


def _redact_lossy(lossy: pl.Expr, *, rules: RuleSet) -> pl.Expr:
    """Redact a line that is not valid UTF-8 (decoded with replacement characters). An
    invalid byte inside a secret cuts it in two pieces that no rule may recognise, so the text
    is also read without the replacement characters; where that reveals a secret, that form
    is kept."""
    joined = unescape_expr(lossy.str.replace_all("\ufffd", "", literal=True))
    joined_redacted = redact_expr(joined, rules=rules, unescape=False)
    return (
        pl.when(joined_redacted != joined)
        .then(joined_redacted)
        .otherwise(redact_expr(lossy, rules=rules))
    )


def classify_lines(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Give each line a ``reason``: null for a JSON object, else why it is quarantined.

    Expects ``valid`` (the line is valid JSON, from DuckDB's parser). Blank lines are dropped.
    """
    # anchored tests rather than a stripped copy of every line: ``\s`` is Unicode White_Space,
    # the characters ``str.strip_chars()`` strips
    blank = pl.col("line").str.contains(r"^\s*$")
    opens_object = pl.col("line").str.contains(r"^\s*\{")
    return lf.filter(pl.col("line").is_null() | ~blank).with_columns(
        reason=pl.when(pl.col("line").is_null())
        .then(pl.lit(QuarantineReason.INVALID_UTF8.value))
        .when(pl.col("valid") & opens_object)
        .then(pl.lit(None, dtype=pl.String))
        .when(pl.col("valid"))
        .then(pl.lit(QuarantineReason.NOT_AN_OBJECT.value))
        .when(pl.col("unterminated"))
        .then(pl.lit(QuarantineReason.TRUNCATED_LINE.value))
        .otherwise(pl.lit(QuarantineReason.INVALID_JSON.value))
    )


#: A JSON escape: a backslash and the character after it (``u`` with its four hex digits).
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_LOW = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
#: Lines that may hold a surrogate escape (a cheap vectorized pre-filter).
SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F]"


def mend_lone_surrogates(line: str) -> str:
    """Replace each ``\\uD800``-``\\uDFFF`` escape that is not half of a pair by ``\\ufffd``.

    JavaScript writes such escapes when a string is cut through an emoji (``JSON.stringify``
    of a truncated tool output), and Python reads them, but DuckDB's JSON parser rejects the
    whole line. Escapes are read left to right, so ``\\\\ud83d`` (an escaped backslash,
    then text) is left alone.
    """
    paired_low_at = -1  # where the low half of the last kept pair starts

    def mend(m: re.Match[str]) -> str:
        nonlocal paired_low_at
        body = m.group(1)
        if len(body) == 1 or body[1] not in "dD" or body[2] not in "89abcdefABCDEF":
            return m.group(0)
        if body[2] in "89abAB":  # high half: kept when a low half follows at once
            if _LOW.match(line, m.end()):
                paired_low_at = m.end()
                return m.group(0)
            return "\\ufffd"
        return m.group(0) if m.start() == paired_low_at else "\\ufffd"

    return _ESCAPE.sub(mend, line)


def quarantine_excerpts(bad: pl.DataFrame, *, rules: RuleSet) -> tuple[pl.Series, dict[str, int]]:
    """The excerpt of each quarantined line (``line``, else the already redacted ``lossy``)
    and the hits per rule: the whole line is redacted before it is cut, so a secret is never
    cut in two where no rule would see it."""
    line, hits = redact_counted_series(bad["line"], rules=rules)
    excerpt = (
        bad.select(pl.coalesce(line, "lossy").str.slice(0, QUARANTINE_EXCERPT_CHARS))
        .to_series()
        .rename("excerpt")
    )
    return excerpt, hits
