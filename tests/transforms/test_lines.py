"""Splitting raw bytes into lines and classifying them."""

from __future__ import annotations

import random

import polars as pl
from polars.testing import assert_frame_equal

from memkiln.io.rules import load_rules
from memkiln.transforms.lines import (
    BLOB_NOTE,
    UTF8_BOM,
    classify_lines,
    clean_lines,
    mend_lone_surrogates,
    split_lines,
)


def test_split_lines_numbers_lines_per_file_and_marks_an_unterminated_last_line() -> None:
    out = split_lines([(1, b'{"a":1}\r\n{"b":2}\n'), (2, b"x\n\ny"), (3, b"")])
    assert_frame_equal(
        out.select("fid", "line_no", "line", "unterminated"),
        pl.DataFrame(
            {
                "fid": [1, 1, 2, 2, 2],
                "line_no": [1, 2, 1, 2, 3],
                "line": ['{"a":1}', '{"b":2}', "x", "", "y"],
                "unterminated": [False, False, False, False, True],
            },
            schema={
                "fid": pl.Int64,
                "line_no": pl.Int32,
                "line": pl.String,
                "unterminated": pl.Boolean,
            },
        ),
    )


def test_invalid_utf8_line_is_null_with_a_lossy_copy_and_its_neighbours_survive() -> None:
    out = split_lines([(7, b'{"ok":1}\n{"bad":"\xff\xfe"}\n{"ok":2}\n')])
    assert out["line"].to_list() == ['{"ok":1}', None, '{"ok":2}']
    assert out["lossy"].to_list()[1] == '{"bad":"\ufffd\ufffd"}'
    assert out["nbytes"].to_list() == [8, 12, 8]


def test_classify_lines_gives_each_bad_line_a_fixed_reason_and_drops_blank_lines() -> None:
    frame = pl.DataFrame(
        {
            "line": ['{"a":1}', "[1,2]", "{bad", "", None, '{"trunc'],
            "valid": [True, True, False, False, None, False],
            "unterminated": [False, False, False, False, False, True],
        }
    )
    out = classify_lines(frame.lazy()).collect()
    assert out["reason"].to_list() == [
        None,
        "not_an_object",
        "invalid_json",
        "invalid_utf8",
        "truncated_line",
    ]


def test_clean_lines_replaces_base64_blobs_by_a_note_and_counts_the_bytes() -> None:
    blob = "gAAAAB" + "Qk9PTUVSQU5H" * 100
    line = '{"type":"reasoning","encrypted_content":"' + blob + '","summary":[]}'
    frame = pl.DataFrame(
        {"line": [line], "lossy": [None]}, schema={"line": pl.String, "lossy": pl.String}
    )
    out = clean_lines(frame.lazy(), rules=load_rules()).collect()
    assert (
        out["line"][0] == '{"type":"reasoning","encrypted_content":' + BLOB_NOTE + ',"summary":[]}'
    )
    assert out["omitted_bytes"][0] == len(blob) + 2 - len(BLOB_NOTE)


def test_clean_lines_keeps_ordinary_long_text() -> None:
    text = "a sentence with spaces " * 100
    frame = pl.DataFrame(
        {"line": ['{"t":"' + text + '"}'], "lossy": [None]},
        schema={"line": pl.String, "lossy": pl.String},
    )
    out = clean_lines(frame.lazy(), rules=load_rules()).collect()
    assert out["line"][0] == '{"t":"' + text + '"}'
    assert out["omitted_bytes"][0] == 0


def test_a_byte_order_mark_at_the_start_of_a_file_is_dropped() -> None:
    bom = b"\xef\xbb\xbf"
    lines = split_lines([(1, bom + b'{"a": 1}\n{"b": 2}\n'), (2, b'{"c": "\xef\xbb\xbf"}\n')])
    assert lines["line"].to_list() == ['{"a": 1}', '{"b": 2}', '{"c": "\ufeff"}']
    assert lines["line_no"].to_list() == [1, 2, 1]


def test_lone_surrogate_escapes_are_mended_and_pairs_and_escaped_backslashes_kept() -> None:
    b = "\\"
    cases = {
        '{"t":"build ok ' + b + 'ud83d"}': '{"t":"build ok ' + b + 'ufffd"}',
        '{"t":"' + b + "ud83d" + b + 'ude00"}': '{"t":"' + b + "ud83d" + b + 'ude00"}',
        '{"t":"' + b + b + 'ud83d"}': '{"t":"' + b + b + 'ud83d"}',
        '{"t":"' + b + "ude00" + b + 'ud83d"}': '{"t":"' + b + "ufffd" + b + 'ufffd"}',
        '{"t":"' + b + "ud83d" + b + "ud83d" + b + 'ude00"}': (
            '{"t":"' + b + "ufffd" + b + "ud83d" + b + 'ude00"}'
        ),
        '{"t":"' + b + 'u00e9"}': '{"t":"' + b + 'u00e9"}',
    }
    for line, expected in cases.items():
        assert mend_lone_surrogates(line) == expected


def test_every_file_of_a_batch_gets_its_own_lines_numbered_from_one() -> None:
    # files ending with and without a newline, empty ones, blank lines, a BOM, CRLF, lines
    # that are not UTF-8, a file of only newlines: each line lands in its file, numbered
    rng = random.Random(7)
    bits = [b'{"a":1}', b"", b"x" * 300, b"\xff\xfe", b'{"b":"\xc3\xa9"}\r', b" "]
    chunks: list[tuple[int, bytes]] = []
    for fid in range(1, 60):
        body = b"\n".join(rng.choice(bits) for _ in range(rng.randrange(0, 9)))
        if rng.random() < 0.5:
            body += b"\n"
        if rng.random() < 0.1:
            body = UTF8_BOM + body
        chunks.append((fid, body))
    chunks.append((60, b"\n\n\n"))
    expected: list[tuple[int, int, bool]] = []
    for fid, data in chunks:
        data = data.removeprefix(UTF8_BOM)
        if not data:
            continue
        pieces = data.split(b"\n")
        if data.endswith(b"\n"):
            pieces = pieces[:-1]
        for i, _ in enumerate(pieces):
            last = i == len(pieces) - 1 and not data.endswith(b"\n")
            expected.append((fid, i + 1, last))
    lines = split_lines(chunks)
    got = list(zip(lines["fid"], lines["line_no"], lines["unterminated"], strict=True))
    assert got == expected
    assert lines["nbytes"].sum() == sum(
        len(d.removeprefix(UTF8_BOM)) - d.removeprefix(UTF8_BOM).count(b"\n") for _, d in chunks
    )
