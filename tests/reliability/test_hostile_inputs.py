"""Hostile input, round three: one bad session, file name or archive never stops the night.

Each test fails on the code before the fix: a year-0 time stopped every run (and ``report``
and ``render-input``), a file name that is not UTF-8 stopped the ingest, a compressed file
was decompressed whole, a long base64-looking working directory became a blob project, and
a file of a known format without a session id was counted ``ok`` but neither stored nor
quarantined.
"""

from __future__ import annotations

import gzip
import json
import os
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
import zstandard

from memkiln.constants import MAX_LINE_BYTES
from memkiln.errors import InputError
from memkiln.io.archive import FileStat, LongLine, _unzstd, read_file
from memkiln.io.html_report import write_report
from memkiln.io.rules import load_rules
from memkiln.io.store import fetch_pl
from memkiln.llm.requests import stage_one_input_for_file
from memkiln.pipeline.ingest import ingest_archive
from memkiln.pipeline.run import run_job
from memkiln.settings import Settings
from memkiln.transforms.project import project_key
from tests.builders import codex_lines, uid, write_rollout

START = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
BAD_TIMES = {
    "year0": "0000-01-01T00:00:00Z",
    "year9999": "9999-12-31T23:59:59Z",
    "future2031": "2031-06-01T10:00:00Z",
    "no_zone": "2026-10-02T10:00:00",
    "garbage": "yesterday at noon",
}


def session(n: int, at: datetime, **kw: object) -> list[dict[str, object]]:
    return codex_lines(
        uid(n),
        request=f"Task {n}: make the checkout page show the tax line; always run the linter",
        at=at,
        calls=[("npm run lint", "Exit code: 0\nOutput:\nno problems")],
        **kw,  # type: ignore[arg-type]
    )


def with_time(lines: list[dict[str, object]], stamp: str) -> list[dict[str, object]]:
    out = []
    for line in lines:
        line = {**line, "timestamp": stamp}
        if line["type"] == "session_meta":
            line["payload"] = {**line["payload"], "timestamp": stamp}  # type: ignore[dict-item]
        out.append(line)
    return out


def settings_for(tmp_path: Path, archive: Path) -> Settings:
    return Settings(
        archive=archive, db=tmp_path / "m.duckdb", out=tmp_path / "out", prefect=False,
        progress=False, min_rollout_idle_hours=0, backfill=True,
    )  # fmt: skip


def test_sessions_without_a_usable_time_are_quarantined_alone_and_every_run_goes_on(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    for i in range(2):
        write_rollout(archive, uid(i), session(i, START + timedelta(hours=i)), START)
    bad: dict[str, Path] = {}
    for n, (name, stamp) in enumerate(BAD_TIMES.items(), start=100):
        lines = with_time(session(n, START), stamp)
        bad[name] = write_rollout(archive, uid(n), lines, START + timedelta(minutes=n))
    settings = settings_for(tmp_path, archive)

    for _ in range(2):  # the next run is not stopped either
        summary = run_job(settings)
        assert summary.consolidate.projects_failed == 0

    with duckdb.connect(str(settings.db), read_only=True) as con:
        stored = {r for (r,) in con.execute("select rollout_id from rollouts").fetchall()}
        quarantined = con.execute(
            "select path, detail from quarantine where reason = 'bad_timestamp'"
        ).fetchall()
        statuses = dict(con.execute("select path, status from files").fetchall())
    assert stored == {uid(0), uid(1)}
    assert {Path(p).name for p, _ in quarantined} == {p.name for p in bad.values()}
    assert all(statuses[str(p)] == "bad_timestamp" for p in bad.values())
    details = " ".join(d for _, d in quarantined)
    assert "0000-01-01" in details and "9999-12-31" in details and "2031-06-01" in details
    assert list((settings.out).glob("*/raw_memories.md"))  # the good sessions' memories

    # report and render-input do not crash on them either
    assert write_report(settings.db, tmp_path / "report.html", memories=settings.out)
    with pytest.raises(InputError, match="no usable time"):
        stage_one_input_for_file(bad["year0"], context_window=None, rules=load_rules())


def test_a_future_session_is_not_active_for_ever(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    soon = datetime.now(UTC) + timedelta(days=400)
    write_rollout(archive, uid(7), session(7, soon), soon)
    summary = ingest_archive(settings_for(tmp_path, archive))
    assert summary.rollouts == 0 and summary.quarantined == 1
    assert summary.set_aside and "bad_timestamp" in summary.set_aside[0]


def test_a_file_name_that_is_not_utf8_is_read_and_recognised_by_its_bytes(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    folder = archive / "old-zip"
    folder.mkdir(parents=True)
    name = b"caf\xe9-" + uid(3).encode() + b".jsonl"
    body = "".join(json.dumps(x) + "\n" for x in session(3, START)).encode()
    with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
        fh.write(body)
    write_rollout(archive, uid(4), session(4, START), START)
    settings = settings_for(tmp_path, archive)

    first = ingest_archive(settings)
    second = ingest_archive(settings)

    assert first.rollouts == 2 and first.quarantined == 0
    assert second.files_skipped == 2 and second.files_new == 0 and second.files_changed == 0
    with duckdb.connect(str(settings.db), read_only=True) as con:
        paths = [p for (p,) in con.execute("select path from files").fetchall()]
    assert any(p.endswith("caf\\xe9-" + uid(3) + ".jsonl") for p in paths)


def write_compressed(path: Path, data: bytes) -> None:
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(zstandard.ZstdCompressor(level=19).compress(data))


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst", ".jsonl"])
def test_a_line_over_the_limit_is_quarantined_with_its_length_and_the_rest_kept(
    tmp_path: Path, suffix: str
) -> None:
    archive = tmp_path / "archive"
    lines = [json.dumps(x) for x in session(5, START)]
    long_line = b'{"type":"response_item","payload":"' + b"0" * (MAX_LINE_BYTES + 10) + b'"}'
    data = "\n".join(lines[:2]).encode() + b"\n" + long_line + b"\n" + "\n".join(lines[2:]).encode()
    path = archive / f"rollout-{uid(5)}{suffix}"
    archive.mkdir()
    if suffix == ".jsonl":
        path.write_bytes(data + b"\n")
    else:
        write_compressed(path, data + b"\n")

    summary = ingest_archive(settings_for(tmp_path, archive))

    assert summary.rollouts == 1
    assert summary.set_aside == [f"{path} line 3: line_too_long ({len(long_line)} bytes, over "
                                 f"the limit of {MAX_LINE_BYTES})"]  # fmt: skip
    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        ((line_no, nbytes),) = con.execute(
            "select line_no, bytes from quarantine where reason = 'line_too_long'"
        ).fetchall()
        items = con.execute("select count(*) from items").fetchone()
    assert (line_no, nbytes) == (3, len(long_line))
    assert items == (len(lines),)  # every other line is kept


def test_a_compressed_file_of_zeros_is_one_long_line_never_held(tmp_path: Path) -> None:
    path = tmp_path / "zeros.jsonl.zst"
    size = 48 * 1024 * 1024
    comp = zstandard.ZstdCompressor(level=19).compressobj()
    with open(path, "wb") as fh:
        for _ in range(size // (4 * 1024 * 1024)):
            fh.write(comp.compress(b"\0" * (4 * 1024 * 1024)))
        fh.write(comp.flush())
    assert path.stat().st_size < 64 * 1024

    with open(path, "rb") as fh:
        largest = max(len(piece) for piece in _unzstd(fh))
    got = read_file(FileStat(str(path), path.stat().st_size, 0), max_line=1024)

    assert largest <= 46 * 1024 * 1024  # a 1 KiB piece of input yields at most ~45 MiB
    assert got.data == b"" and got.error is None
    assert got.long_lines == (LongLine(1, size),)


def test_a_gzip_of_one_repeated_line_stops_at_the_file_limit(tmp_path: Path) -> None:
    path = tmp_path / "repeated.jsonl.gz"
    line = b'{"type":"noise","payload":{"text":"' + b"x" * 100 + b'"}}\n'
    with gzip.open(path, "wb") as gz:
        for _ in range(64):
            gz.write(line * 10_000)
    limit = 1024 * 1024

    got = read_file(FileStat(str(path), path.stat().st_size, 0), max_bytes=limit)

    assert got.error == "file_too_large"
    assert len(got.data) <= limit and got.data.endswith(b"\n")
    assert got.data == line * (len(got.data) // len(line))


def test_two_long_working_directories_stay_two_projects(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    cwds = ["/home/dev/" + "a" * 600, "/home/dev/" + "b" * 600]
    for n, cwd in enumerate(cwds, start=20):
        write_rollout(archive, uid(n), session(n, START, cwd=cwd, remote=None), START)
    settings = settings_for(tmp_path, archive)
    ingest_archive(settings)
    with duckdb.connect(str(settings.db), read_only=True) as con:
        keys = con.execute("select cwd, project_key from rollouts order by cwd").fetchall()
    assert keys == [(c, c) for c in cwds]


def test_a_git_host_that_ignores_case_and_a_decomposed_path_are_one_project() -> None:
    nfd = unicodedata.normalize("NFD", "/home/dev/café")
    nfc = unicodedata.normalize("NFC", "/home/dev/café")
    frame = pl.DataFrame(
        {
            "remote": ["https://github.com/Acme/Widget.git", "git@github.com:acme/widget",
                       "https://git.example.com/Acme/Widget", None, None],
            "cwd": ["/a", "/b", "/c", nfd, nfc],
        }
    )  # fmt: skip
    keys = frame.select(key=project_key(remote=pl.col("remote"), cwd=pl.col("cwd")))["key"]
    assert keys[0] == keys[1] == "github.com/acme/widget"
    assert keys[2] == "git.example.com/Acme/Widget"  # a host that may not ignore case
    assert keys[3] == keys[4] == nfc


def test_lines_of_a_session_without_its_header_are_quarantined_not_counted_ok(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    lines = session(9, START)[1:]  # no session_meta, and no id in the file name
    (archive / "headless.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    assert summary.rollouts == 0 and summary.quarantined == 1 and summary.files_failed == 1
    with duckdb.connect(str(settings.db), read_only=True) as con:
        assert con.execute("select status from files").fetchall() == [("no_session",)]
        assert con.execute("select reason from quarantine").fetchall() == [("no_session",)]


def test_a_batch_normalized_in_parts_stores_what_it_stores_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memkiln.io import loader

    archive = tmp_path / "archive"
    for n in range(4):
        write_rollout(archive, uid(n), session(n, START + timedelta(hours=n)), START)
    (archive / "noise.jsonl").write_text('{"type": "noise"}\n[1, 2]\n')
    write_rollout(archive, uid(50), with_time(session(50, START), "garbage"), START)
    tables = ("files", "rollouts", "items", "quarantine", "tool_calls")

    def stored(name: str) -> dict[str, pl.DataFrame]:
        s = settings_for(tmp_path / name, archive)
        ingest_archive(s)
        with duckdb.connect(str(s.db), read_only=True) as con:
            frames = {t: fetch_pl(con, f"select * from {t}") for t in tables}
        # when and by which run aside, the same rows
        return {
            t: f.drop(
                c for c, d in f.schema.items() if d.is_temporal() or c.endswith("run_id")
            ).sort(pl.all())
            for t, f in frames.items()
        }

    whole = stored("whole")
    monkeypatch.setattr(loader, "BATCH_DECOMPRESSED_BYTES", 1)  # one part per file
    parts = stored("parts")
    for table in tables:
        assert parts[table].equals(whole[table]), table
    assert whole["rollouts"].height == 4 and whole["quarantine"].height >= 2


def test_a_stored_session_with_a_time_out_of_range_is_skipped_never_active_for_ever() -> None:
    from tests.transforms.test_selection import NOW, decide, rollout

    year0 = datetime(1, 1, 1, tzinfo=UTC)  # what DuckDB gives back of year 0 is out of reach
    rows = [
        rollout("ok"),
        rollout("future", updated_at=NOW + timedelta(days=1800)),
        rollout("ancient", updated_at=datetime(1970, 1, 1, tzinfo=UTC)),
        rollout("born-before", started_at=year0),
        rollout("undated", updated_at=None),
    ]
    assert decide(rows, backfill=True) == {
        "ok": "take", "future": "bad_timestamp", "ancient": "bad_timestamp",
        "born-before": "bad_timestamp", "undated": "take",
    }  # fmt: skip
