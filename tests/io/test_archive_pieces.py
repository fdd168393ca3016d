"""``archive.read_pieces``: a file's lines in pieces, together what ``read_file`` reads, each
piece whole lines of about its size, whatever the stream (plain, gzip members, zstd frames)."""

from __future__ import annotations

import tempfile

from hypothesis import given
from hypothesis import strategies as st

from memkiln.io.archive import READ_PIECE_BYTES, FileStat, read_file, read_pieces
from tests.reliability.test_properties_hostile import FAST, compress, expected, line_lengths

MAX_LINE = 40


@FAST
@given(
    line_lengths,
    st.booleans(),
    st.sampled_from(["gzip", "zstd", "none"]),
    st.lists(st.integers(0, 2000), max_size=4),
    st.integers(1, 120),
    st.integers(20, 400),
)
def test_pieces_of_any_stream_are_its_lines_in_order_with_their_numbers(
    lengths: list[int],
    ends_with_newline: bool,
    kind: str,
    cuts: list[int],
    piece_bytes: int,
    max_bytes: int,
) -> None:
    data = b"\n".join(bytes([97 + i % 26]) * n for i, n in enumerate(lengths))
    data += b"\n" if ends_with_newline and data else b""
    raw = data if kind == "none" else compress(data, kind, cuts)
    suffix = {"gzip": ".jsonl.gz", "zstd": ".jsonl.zst", "none": ".jsonl"}[kind]
    with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
        fh.write(raw)
        fh.flush()
        stat = FileStat(fh.name, len(raw), 0)
        pieces = list(read_pieces(stat, piece_bytes=piece_bytes, max_line=MAX_LINE))
        limited = list(
            read_pieces(stat, piece_bytes=piece_bytes, max_bytes=max_bytes, max_line=MAX_LINE)
        )
        whole = read_file(stat, max_line=MAX_LINE)

    assert [p.last for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert b"".join(p.data for p in pieces) == whole.data == expected(data, MAX_LINE)
    assert tuple(ln for p in pieces for ln in p.long_lines) == whole.long_lines
    line = 1
    for p in pieces:
        assert p.first_line == line
        assert all(ln.line_no >= line for ln in p.long_lines)
        line += p.data.count(b"\n")
        if not p.last:  # whole lines, about the size asked (a slice and a line more at most)
            assert p.data.endswith(b"\n")
            assert piece_bytes <= len(p.data) <= piece_bytes + READ_PIECE_BYTES + MAX_LINE + 1
    assert pieces[-1].error is None
    # with a limit on the file: what is kept stays within it, in whole lines, and says so
    kept = b"".join(p.data for p in limited)
    assert len(kept) <= max_bytes and whole.data.startswith(kept)
    if len(whole.data) > max_bytes:
        assert limited[-1].error == "file_too_large"
    else:
        assert kept == whole.data and limited[-1].error is None
