"""``memkiln redact``'s body: files (or stdin) to stdout, redacted, in bounded pieces.

The pieces are :mod:`memkiln.io.scrub`'s (about 8 MiB of whole lines, a private-key block
never cut). A piece of JSON lines (a session's JSONL; blank lines too) is scanned line by
line, as bytes, with
the rule set's Hyperscan prefilter (``transforms/redact_prefilter``): only the lines where some
rule may match are decoded and redacted (together, as one batch: a secret Betterleaks' rules
confirm in one line is replaced in the others that hold a key word, as ingest does); every
other line is written as it was read, never decoded nor copied into Polars. Any other piece,
and every piece when Hyperscan is not installed, is redacted as :mod:`memkiln.io.scrub` does.
The output is the same either way (a test compares both). Bytes that are not valid UTF-8 are
written as U+FFFD, as before.

Memory is bounded by the piece: one piece, its lines and the redacted lines at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import polars as pl

from memkiln.io.rules import prefiltered
from memkiln.io.scrub import CHUNK_BYTES, _chunks, redact_chunks
from memkiln.transforms.redact import RuleSet, plan_fits, redact_counted_series
from memkiln.transforms.redact_prefilter import Prefilter, Scan

__all__ = ["redact_piece", "redact_streams"]


def _valid(piece: bytes) -> bytes:
    """``piece`` as valid UTF-8 (what is not: U+FFFD)."""
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return piece.decode("utf-8", errors="replace").encode("utf-8")
    return piece


def _json_or_blank(line: bytes) -> bool:
    """A JSON object's line, or a blank one (a session file may end with one): a blank line
    holds no secret, and no secret spans two JSON lines."""
    return line.startswith(b"{") or not line.strip()


def redact_piece(piece: bytes, *, rules: RuleSet) -> tuple[bytes, Counter[str]]:
    """One piece of whole lines, redacted, and the hits per rule."""
    piece = _valid(piece)
    prefilter = rules.prefilter
    lines = piece.split(b"\n")
    tail = lines.pop() if lines else b""  # after the last line break: b"" or a last line
    json_lines = all(_json_or_blank(line) for line in lines) and _json_or_blank(tail)
    if prefilter is None or not plan_fits(prefilter.plan, rules) or not json_lines:
        redacted, found = next(redact_chunks([piece.decode("utf-8")], rules=rules))
        return redacted.encode("utf-8"), found
    rows = [line + b"\n" for line in lines] + ([tail] if tail else [])
    return _redact_rows(rows, prefilter, rules)


def _redact_rows(
    rows: list[bytes], prefilter: Prefilter, rules: RuleSet
) -> tuple[bytes, Counter[str]]:
    ids = prefilter.ids_of_bytes(rows)
    if not ids:
        return b"".join(rows), Counter()
    hit = sorted(ids)
    texts = pl.Series("text", [rows[i].decode("utf-8") for i in hit], dtype=pl.String)
    scan = Scan(prefilter, texts, {n: ids[i] for n, i in enumerate(hit)})
    redacted, found = redact_counted_series(texts, rules=rules, unescape=False, scan=scan)
    for i, text in zip(hit, redacted.to_list(), strict=True):
        rows[i] = text.encode("utf-8")
    return b"".join(rows), Counter(found)


def redact_streams(
    files: Iterable[Path], *, stdin: BinaryIO, stdout: BinaryIO, rules: RuleSet
) -> Counter[str]:
    """Redact every file in order (stdin when there is none) to ``stdout``; hits per rule.
    ``rules`` get their Hyperscan prefilter here when they have none."""
    total: Counter[str] = Counter()
    rules = prefiltered(rules)
    paths = list(files)
    sources: list[Path | None] = list(paths) if paths else [None]
    for path in sources:
        stream = stdin if path is None or str(path) == "-" else path.open("rb")
        try:
            for piece in _chunks(stream, CHUNK_BYTES):
                redacted, hits = redact_piece(piece, rules=rules)
                stdout.write(redacted)
                total.update(hits)
        finally:
            if stream is not stdin:
                stream.close()
    stdout.flush()
    return total
