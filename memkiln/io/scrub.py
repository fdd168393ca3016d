"""``memkiln redact``: scrub stdin or files to stdout with the rule set ingest uses.

Users scrub a log or a transcript before pasting it anywhere. The text is redacted in chunks of
whole lines (a private-key block inside a chunk is found whole), with the same rules as
ingest, so what the command removes is exactly what memkiln would have removed. A chunk whose
lines are all JSON objects (a session's JSONL) is redacted line by line, one row each: a JSON
line holds no raw line break, so no secret spans two of them, and the rows no rule matches are
skipped instead of every pass rewriting the whole chunk; any other chunk is one text. The hits
per rule are counted while redacting. Bytes that are not valid UTF-8 are written as U+FFFD.
JSON escapes are not decoded here: the output is the input, byte for byte, except the secrets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import polars as pl

from memkiln.transforms.redact import RuleSet, redact_counted_series

__all__ = ["CHUNK_BYTES", "redact_chunks", "redact_streams"]

#: Text redacted per Polars call: whole lines, cut at a blank line when one is near.
CHUNK_BYTES = 8 << 20


#: The longest key block kept whole across two pieces (an RSA-8192 PEM is under 7 KB); a
#: ``-----BEGIN`` line further back, never ended, does not hold the pieces back.
KEY_BLOCK_BYTES = 64 * 1024


def _chunks(stream: BinaryIO, size: int) -> Iterator[bytes]:
    """Pieces of ``stream`` of about ``size`` bytes that end at a line break (or the end),
    never inside a ``-----BEGIN … -----END`` block."""
    rest = b""
    while True:
        block = stream.read(size)
        if not block:
            if rest:
                yield rest
            return
        data = rest + block
        cut = data.rfind(b"\n\n")  # between paragraphs: never inside a key block
        if cut < len(data) // 2:
            cut = data.rfind(b"\n")
        begin = data.rfind(b"-----BEGIN", max(0, cut + 1 - KEY_BLOCK_BYTES), cut + 1)
        if begin >= 0 and data.find(b"-----END", begin, cut + 1) < 0:
            # a key block would be cut in two (a log with no blank line near): the piece ends
            # before the block, which goes whole into the next one
            cut = data.rfind(b"\n", 0, begin)
        if cut < 0:
            rest = data
            continue
        yield data[: cut + 1]
        rest = data[cut + 1 :]


def _rows(chunk: str) -> list[str]:
    """The rows a chunk is redacted as: its lines (each with its line break) when every line
    is a JSON object, else the whole chunk."""
    lines = chunk.splitlines(keepends=True)
    if lines and all(line.startswith("{") for line in lines):
        return lines
    return [chunk]


def redact_chunks(chunks: Iterable[str], *, rules: RuleSet) -> Iterator[tuple[str, Counter[str]]]:
    """Each chunk redacted, with the hits per rule it produced."""
    for chunk in chunks:
        rows = pl.Series("text", _rows(chunk), dtype=pl.String)
        redacted, found = redact_counted_series(rows, rules=rules, unescape=False)
        yield "".join(redacted.to_list()), Counter(found)


def redact_streams(
    files: Iterable[Path], *, stdin: BinaryIO, stdout: BinaryIO, rules: RuleSet
) -> Counter[str]:
    """Redact every file in order (stdin when there is none) to ``stdout``; hits per rule."""
    total: Counter[str] = Counter()
    paths = list(files)
    sources: list[Path | None] = list(paths) if paths else [None]
    for path in sources:
        stream = stdin if path is None or str(path) == "-" else path.open("rb")
        try:
            texts = (c.decode("utf-8", errors="replace") for c in _chunks(stream, CHUNK_BYTES))
            for redacted, hits in redact_chunks(texts, rules=rules):
                stdout.write(redacted.encode("utf-8"))
                total.update(hits)
        finally:
            if stream is not stdin:
                stream.close()
    stdout.flush()
    return total
