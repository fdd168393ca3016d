"""A session file past WHOLE_FILE_BYTES of lines is read, normalized and written in pieces
by the writer (``memkiln.io.large_file``): stored whole, as if read at once, in bounded memory.

Before, such a file kept its first 32 MiB of lines and quarantined the rest as
``file_too_large``: a long real session lost its end.
"""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
import zstandard

from memkiln.io import large_file, loader
from memkiln.io.store import fetch_pl
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.builders import codex_lines, uid, write_rollout

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "rollouts"
START = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
TABLES = ("files", "rollouts", "items", "quarantine", "tool_calls")


def settings_for(tmp_path: Path, archive: Path) -> Settings:
    return Settings(
        archive=archive, db=tmp_path / "m.duckdb", out=tmp_path / "out", prefect=False,
        progress=False, min_rollout_idle_hours=0, backfill=True,
    )  # fmt: skip


def stored(tmp_path: Path, archive: Path) -> dict[str, pl.DataFrame]:
    """Every row of the ingest tables, without the times and run ids (they differ)."""
    s = settings_for(tmp_path, archive)
    ingest_archive(s)
    with duckdb.connect(str(s.db), read_only=True) as con:
        frames = {t: fetch_pl(con, f"select * from {t}") for t in TABLES}
        frames["hits"] = fetch_pl(con, "select rule_id, hits from redaction_hits")
    return {
        t: f.drop(c for c, d in f.schema.items() if d.is_temporal() or c.endswith("run_id")).sort(
            pl.all()
        )
        for t, f in frames.items()
    }


def in_pieces(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    """Every file is a large one, read in pieces of ``piece`` bytes of lines."""
    monkeypatch.setattr(loader, "WHOLE_FILE_BYTES", 1)
    monkeypatch.setattr(large_file, "FILE_PIECE_BYTES", piece)


def test_the_corpus_read_in_small_pieces_stores_what_it_stores_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"  # the corpus files under 300 KB: every format, 2.4 MB
    for path in sorted(CORPUS.rglob("*.jsonl*")):
        if path.stat().st_size < 300 * 1024:
            (archive / path.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, archive / path.parent.name / path.name)
    whole = stored(tmp_path / "whole", archive)
    in_pieces(monkeypatch, 64 * 1024)
    pieces = stored(tmp_path / "pieces", archive)
    assert whole["rollouts"]["format"].unique().sort().to_list() == ["claude", "codex", "pi"]
    assert whole["rollouts"].height > 20 and whole["tool_calls"].height > 100
    for table in (*TABLES, "hits"):
        assert pieces[table].equals(whole[table]), table


FINAL = "FINAL-ANSWER: the checkout page shows the tax line."


def long_session(n: int, *, mib: int) -> list[dict[str, object]]:
    """A Codex session of about ``mib`` MiB: many shell calls with long outputs (words, not
    a blob), then a final answer."""
    words = " ".join(f"line{i} of the build log says ok" for i in range(500))  # ~17 KB
    calls = [(f"npm run build -- --step {i}", f"Exit code: 0\nOutput:\n{words}") for i in
             range(mib * 1024 * 1024 // (len(words) + 300))]  # fmt: skip
    return codex_lines(
        uid(n), request=f"Task {n}: make the checkout page show the tax line", at=START,
        calls=calls, answer=FINAL,
    )  # fmt: skip


def write_session(archive: Path, n: int, lines: list[dict[str, object]], kind: str) -> Path:
    path = write_rollout(archive, uid(n), lines, START)
    if kind == "plain":
        return path
    raw = path.read_bytes()
    path.unlink()
    if kind == "gz":
        target = path.with_name(path.name + ".gz")
        target.write_bytes(gzip.compress(raw, compresslevel=1))
    else:
        target = path.with_name(path.name + ".zst")
        target.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    return target


@pytest.mark.parametrize("kind", ["plain", "zst", "gz"])
def test_a_40_mib_session_is_stored_whole_with_its_last_item(tmp_path: Path, kind: str) -> None:
    archive = tmp_path / "archive"
    lines = long_session(1, mib=40)
    write_session(archive, 1, lines, kind)
    responses = len(lines) - 1  # every line is an item; all but the header are responses
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    with duckdb.connect(str(settings.db), read_only=True) as con:
        size = con.execute("select sum(nbytes) from (select length(text) nbytes from items)")
        assert size.fetchone()[0] > 32 * 1024 * 1024  # type: ignore[index]
        n, last_seq = con.execute("select count(*), max(seq) from items").fetchone()  # type: ignore[misc]
        last = con.execute("select text from items order by seq desc limit 1").fetchone()
        files = con.execute("select status, lines, quarantined from files").fetchall()
        rollout = con.execute(
            "select n_items, n_tool_calls, n_lines, n_quarantined from rollouts"
        ).fetchall()
        calls = con.execute("select count(*), count(*) filter (has_output) from tool_calls")
        n_calls, answered = calls.fetchone()  # type: ignore[misc]
        reasons = con.execute("select reason from quarantine").fetchall()
    assert summary.rollouts == 1 and summary.quarantined == 0 and summary.files_failed == 0
    assert n == len(lines) and last_seq == len(lines) - 1
    assert last == (FINAL,)
    assert files == [("ok", len(lines), 0)] and reasons == []
    n_calls_sent = (len(lines) - 3) // 2
    assert rollout == [(responses, n_calls_sent, len(lines), 0)]
    assert n_calls == answered == n_calls_sent


def test_a_tool_call_and_its_output_in_two_pieces_are_paired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(2, mib=1)
    lines[5:5] = [{"timestamp": "2026-10-01T09:00:30.000Z", "type": "response_item"}]  # bad
    # three calls at once, answered last first: the first call's output comes pieces later
    parallel = [
        {"type": "function_call", "name": "shell", "call_id": f"p{i}",
         "arguments": json.dumps({"command": ["bash", "-lc", f"make step{i}"]})}
        for i in range(3)
    ] + [
        {"type": "function_call_output", "call_id": f"p{i}",
         "output": f"Exit code: {i}\nOutput:\n" + "word " * 300}
        for i in reversed(range(3))
    ]  # fmt: skip
    lines[9:9] = [
        {"timestamp": f"2026-10-01T09:00:{40 + i}.000Z", "type": "response_item", "payload": p}
        for i, p in enumerate(parallel)
    ]
    (archive / "x").mkdir(parents=True)
    write_session(archive, 2, lines, "plain")
    (archive / "x" / "broken.jsonl").write_text('{"a": 1}\nnot json\n')
    whole = stored(tmp_path / "whole", archive)
    in_pieces(monkeypatch, 700)  # about one line a piece: every call apart from its output
    pieces = stored(tmp_path / "pieces", archive)
    for table in (*TABLES, "hits"):
        assert pieces[table].equals(whole[table]), table
    assert whole["tool_calls"]["has_output"].all()
    answered = whole["tool_calls"].filter(pl.col("call_id").str.starts_with("p")).sort("call_id")
    assert answered.select("call_id", "exit_code").rows() == [("p0", 0), ("p1", 1), ("p2", 2)]


def audits_clean(db: Path) -> None:
    from memkiln.io.store import audits

    with duckdb.connect(str(db)) as con:
        found = audits(con)
    assert found == {name: 0 for name in found}


def test_a_run_stopped_between_pieces_leaves_the_file_to_be_read_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    write_session(archive, 3, long_session(3, mib=1), "zst")
    clean = stored(tmp_path / "clean", archive)
    in_pieces(monkeypatch, 64 * 1024)
    written = large_file.LargeFile._write_piece
    calls = 0

    def stop_at_the_third(self: large_file.LargeFile, *args: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt  # as a stop does, between two pieces
        written(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(large_file.LargeFile, "_write_piece", stop_at_the_third)
    settings = settings_for(tmp_path / "stopped", archive)
    with pytest.raises(KeyboardInterrupt):
        ingest_archive(settings)
    with duckdb.connect(str(settings.db), read_only=True) as con:
        row = con.execute("select status, mtime_ns, content_hash from files").fetchall()
        partial = con.execute("select count(*) from items").fetchone()[0]  # type: ignore[index]
    assert row == [("incomplete", -1, None)] and partial > 0
    audits_clean(settings.db)

    monkeypatch.setattr(large_file.LargeFile, "_write_piece", written)
    again = ingest_archive(settings)  # the next run reads it again, from its start

    assert again.files_changed == 1
    after = stored(tmp_path / "stopped", archive)  # a third run: nothing to read
    for table in TABLES:
        assert after[table].equals(clean[table]), table
    audits_clean(settings.db)


def test_a_large_session_that_grows_is_stored_again_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(4, mib=1)
    path = write_session(archive, 4, lines[:-10], "plain")
    in_pieces(monkeypatch, 64 * 1024)
    settings = settings_for(tmp_path, archive)
    ingest_archive(settings)
    with path.open("a") as fh:  # the session goes on
        fh.write("".join(json.dumps(x) + "\n" for x in lines[-10:]))

    summary = ingest_archive(settings)

    with duckdb.connect(str(settings.db), read_only=True) as con:
        n, last = con.execute("select count(*), max(seq) from items").fetchone()  # type: ignore[misc]
        text = con.execute("select text from items order by seq desc limit 1").fetchone()
        n_items = con.execute("select n_lines from rollouts").fetchone()
    assert summary.files_changed == 1 and summary.rollouts == 1
    assert n == len(lines) and last == len(lines) - 1 and text == (FINAL,)
    assert n_items == (len(lines),)
    audits_clean(settings.db)


def test_a_large_session_held_by_another_file_is_a_duplicate_and_stores_no_item_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(5, mib=1)
    write_session(archive, 5, lines, "plain")
    copy = archive / "copy"
    copy.mkdir()
    write_session(copy, 5, lines, "gz")
    in_pieces(monkeypatch, 64 * 1024)
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    assert summary.rollouts == 1 and summary.statuses.get("duplicate") == 1
    with duckdb.connect(str(settings.db), read_only=True) as con:
        n = con.execute("select count(*) from items").fetchone()
    assert n == (len(lines),)
    audits_clean(settings.db)


def test_a_gzip_of_one_repeated_line_of_no_known_format_stops_after_its_first_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    line = json.dumps({"type": "noise", "payload": {"text": "x" * 200}}).encode() + b"\n"
    with gzip.open(archive / "repeated.jsonl.gz", "wb", compresslevel=9) as gz:
        for _ in range(200):
            gz.write(line * 1000)  # 45 MiB
    write_session(archive, 6, long_session(6, mib=1), "plain")
    monkeypatch.setattr(large_file, "FILE_PIECE_BYTES", 1024 * 1024)
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    assert summary.rollouts == 1 and summary.files_failed == 1
    assert any(
        "repeated.jsonl.gz: unrecognized_format" in s and "the rest not" in s
        for s in summary.set_aside
    )
    with duckdb.connect(str(settings.db), read_only=True) as con:
        rows = con.execute(
            "select status, lines from files where path like '%/repeated.jsonl.gz'"
        ).fetchall()
    assert rows[0][0] == "unrecognized" and rows[0][1] < 10_000  # one piece read, not 200,000


def test_a_large_file_of_garbage_lines_stops_at_the_limit_of_bad_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(7, mib=1)
    path = write_session(archive, 7, lines[:20], "plain")
    with path.open("a") as fh:
        fh.write("not json at all\n" * 5000)
        fh.write("".join(json.dumps(x) + "\n" for x in lines[20:]))
    in_pieces(monkeypatch, 16 * 1024)
    monkeypatch.setattr(large_file, "MAX_BAD_LINES", 100)
    settings = settings_for(tmp_path, archive)

    summary = ingest_archive(settings)

    with duckdb.connect(str(settings.db), read_only=True) as con:
        reasons = dict(
            con.execute("select reason, count(*) from quarantine group by reason").fetchall()
        )
        status = con.execute("select status from files").fetchall()
        n = con.execute("select count(*) from items").fetchone()
    assert reasons == {"invalid_json": 100, "too_many_bad_lines": 1}
    assert status == [("partial",)] and n == (20,)  # the lines before are kept
    assert summary.rollouts == 1
    assert any("too_many_bad_lines" in s and "not read" in s for s in summary.set_aside)


def test_a_large_file_past_the_file_limit_keeps_its_lines_up_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "archive"
    lines = long_session(8, mib=1)
    write_session(archive, 8, lines, "zst")
    in_pieces(monkeypatch, 64 * 1024)
    monkeypatch.setattr(large_file, "MAX_FILE_BYTES", 512 * 1024)
    settings = settings_for(tmp_path, archive)

    ingest_archive(settings)

    with duckdb.connect(str(settings.db), read_only=True) as con:
        reasons = con.execute("select reason, detail from quarantine").fetchall()
        n = con.execute("select count(*) from items").fetchone()[0]  # type: ignore[index]
        status = con.execute("select status from files").fetchall()
    assert [r for r, _ in reasons] == ["file_too_large"] and "not read" in reasons[0][1]
    assert 0 < n < len(lines) and status == [("partial",)]


def test_a_prepared_batch_names_its_large_files_across_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memkiln.io.loader import PreparedBatch, frame_to_ipc, prepare_batch_ipc

    archive = tmp_path / "archive"
    path = write_session(archive, 9, long_session(9, mib=1), "gz")
    monkeypatch.setattr(loader, "WHOLE_FILE_BYTES", 64 * 1024)
    batch = pl.DataFrame(
        {"path": [str(path)], "size": [path.stat().st_size],
         "mtime_ns": [path.stat().st_mtime_ns], "file_id": [1]}
    )  # fmt: skip

    prepared = PreparedBatch.from_ipc(prepare_batch_ipc(frame_to_ipc(batch)))

    assert prepared.files.is_empty() and prepared.norm.items.is_empty()
    assert prepared.large.select("file_id", "size").rows() == [(1, path.stat().st_size)]
    assert prepared.large["raw_path"][0] == str(path).encode()
