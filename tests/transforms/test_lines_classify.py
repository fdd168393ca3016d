"""classify_lines decides blank lines and object lines without a stripped copy of every line:
the same decisions as ``str.strip_chars()`` for every whitespace character."""

from __future__ import annotations

import sys

import polars as pl

from memkiln.transforms.lines import classify_lines

# every character Python calls whitespace, and a few that look blank but are not
SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
NOT_SPACES = ["\u200b", "\ufeff", "\x00", "\u2060", "x"]


def _lines() -> list[str | None]:
    lines: list[str | None] = [None, "", "{}", '  {"a": 1}', "[1]", "  [1]", "{", "x{"]
    for c in SPACES + NOT_SPACES:
        lines += [c, c * 3, f"{c}{{}}", f"{{}}{c}", f"{c}[1]{c}", f"{c}x{c}"]
    return lines


def test_blank_and_object_lines_are_decided_as_strip_chars_would() -> None:
    lines = _lines()
    frame = pl.LazyFrame(
        {
            "line": lines,
            "valid": [True] * len(lines),
            "unterminated": [False] * len(lines),
            "row": list(range(len(lines))),
        },
        schema={
            "line": pl.String,
            "valid": pl.Boolean,
            "unterminated": pl.Boolean,
            "row": pl.Int64,
        },
    )
    got = classify_lines(frame).collect()
    stripped = pl.col("line").str.strip_chars()
    expected = (
        frame.filter(pl.col("line").is_null() | (stripped.str.len_bytes() > 0))
        .with_columns(
            reason=pl.when(pl.col("line").is_null())
            .then(pl.lit("invalid_utf8"))
            .when(stripped.str.starts_with("{"))
            .then(pl.lit(None, dtype=pl.String))
            .otherwise(pl.lit("not_an_object"))
        )
        .collect()
    )
    assert got["row"].to_list() == expected["row"].to_list()
    assert got["reason"].to_list() == expected["reason"].to_list()
    # the cases that matter: blank lines go, an object after leading blanks is an object
    kept = dict(zip(got["line"].to_list(), got["reason"].to_list(), strict=True))
    assert "\u3000" not in kept and "\u00a0\u00a0\u00a0" not in kept
    assert kept["\u3000{}"] is None and kept["\u200b{}"] == "not_an_object"
