"""Every file lists at most ``MAX_BAD_LINES`` quarantined lines: a file read whole in a batch
as a large file read in pieces does (before, only a large file was held to it: a 32 MiB file
of garbage lines stored millions of quarantine rows)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from memkiln.io import large_file, loader
from memkiln.pipeline.ingest import ingest_archive
from memkiln.transforms.pieces import capped_quarantine
from tests.io.test_large_file import in_pieces, long_session, settings_for, write_session


def quarantined(db: Path) -> tuple[dict[str, int], list[int], int]:
    with duckdb.connect(str(db), read_only=True) as con:
        reasons = dict(
            con.execute("select reason, count(*) from quarantine group by reason").fetchall()
        )
        lines = [r[0] for r in con.execute(
            "select line_no from quarantine where reason = 'invalid_json' order by line_no"
        ).fetchall()]  # fmt: skip
        items = con.execute("select count(*) from items").fetchall()[0][0]
    return reasons, lines, items


@pytest.mark.parametrize("read", ["whole", "in pieces"])
def test_a_file_of_garbage_lines_lists_the_first_bad_lines_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(7, mib=1)
    path = write_session(archive, 7, lines[:20], "plain")
    with path.open("a") as fh:
        fh.write("not json at all\n" * 5000)
        fh.write("".join(json.dumps(x) + "\n" for x in lines[20:]))
    monkeypatch.setattr(loader, "MAX_BAD_LINES", 100)
    monkeypatch.setattr(large_file, "MAX_BAD_LINES", 100)
    if read == "in pieces":
        in_pieces(monkeypatch, 16 * 1024)
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    reasons, bad, items = quarantined(settings.db)
    assert reasons == {"invalid_json": 100, "too_many_bad_lines": 1}
    assert bad == list(range(21, 121))  # the same first 100, whichever way it is read
    assert any("too_many_bad_lines" in s for s in summary.set_aside)
    if read == "whole":  # its lines were read: all of its session is kept
        assert items == len(lines)
    else:  # the lines before are kept, the rest not read
        assert items == 20


def test_the_cap_keeps_whole_file_rows_first_then_lines_in_order_per_file() -> None:
    rows = pl.DataFrame(
        {
            "file_id": [1, 1, 1, 2, 1],
            "line_no": [5, 3, None, 9, 4],
            "reason": [
                "invalid_json",
                "invalid_json",
                "corrupt_compressed",
                "invalid_json",
                "line_too_long",
            ],
            "detail": [None, None, "x", None, "9 bytes"],
            "excerpt": [None] * 5,
            "bytes": [1, 2, 3, 4, 5],
        },
        schema=loader.QUARANTINE_SCHEMA,
    )
    capped = capped_quarantine(rows, limit=2, rest="then")
    assert capped.select("file_id", "line_no", "reason").rows() == [
        (1, None, "corrupt_compressed"),
        (1, 3, "invalid_json"),
        (2, 9, "invalid_json"),
        (1, None, "too_many_bad_lines"),
    ]
    stop = capped.row(3, named=True)
    assert (
        stop["bytes"] == 6
        and "2 more are not" in stop["detail"]
        and stop["detail"].endswith("then")
    )
    assert capped_quarantine(rows, limit=4, rest="").equals(rows)  # under it: as it was
