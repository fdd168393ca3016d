"""End-to-end ingest over real files in temp dirs and a real DuckDB file."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from memkiln.io.store import table_counts
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.summaries import IngestSummary


def run_ingest(archive: Path, db: Path, **kw: int) -> IngestSummary:
    return ingest_archive(Settings(archive=archive, db=db, **kw))


def counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return table_counts(con)


def append_user_turn(path: Path, text: str) -> None:
    """Append one Codex user message to a session file, as a resumed session does."""
    line = {
        "timestamp": "2026-11-01T10:00:00.000Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        },
    }
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")  # json writes a lone surrogate as its escape


def holds_a_session(path: Path) -> bool:
    """Independent of memkiln's code: does any line of the file name a session?"""
    with path.open("rb") as fh:
        for raw in fh:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            payload = obj.get("payload")
            if obj.get("type") == "session_meta" and isinstance(payload, dict):
                return True
            if "type" not in obj and "id" in obj and "timestamp" in obj:
                return True  # legacy Codex header line
            if obj.get("sessionId") or (obj.get("type") == "session" and obj.get("id")):
                return True
    return False


@pytest.mark.corpus
def test_every_corpus_file_ingests_and_each_session_file_is_one_rollout(
    ingested_corpus: Path,
) -> None:
    files = sorted((ingested_corpus / "corpus").rglob("*.jsonl"))
    with_session = [f for f in files if holds_a_session(f)]

    summary = json.loads((ingested_corpus / "summary.json").read_text(encoding="utf-8"))

    assert summary["files_seen"] == len(files)
    assert summary["rollouts"] == len(with_session)
    with duckdb.connect(str(ingested_corpus / "m.duckdb"), read_only=True) as con:
        by_format = dict(con.execute("select format, count(*) from rollouts group by 1").fetchall())
        assert set(by_format) == {"codex", "claude", "pi"}
        # the corpus' known corrupt lines (two objects on one line, an invalid escape)
        reasons = con.execute("select reason, count(*) from quarantine group by 1").fetchall()
        assert dict(reasons) == {"invalid_json": 3}
        # no encrypted reasoning blob reaches the store
        blob = con.execute(
            'select count(*) from items where payload_json like \'%"encrypted_content":"gAAAA%\''
        ).fetchone()[0]
        assert blob == 0


def test_second_run_reads_nothing_and_changes_no_count(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    first = run_ingest(sample_archive, db)
    before = counts(db)
    second = run_ingest(sample_archive, db)

    assert first.files_new == first.files_seen > 0
    assert second.files_skipped == second.files_seen == first.files_seen
    assert second.bytes_read == 0 and second.items == 0
    assert counts(db) == before


def test_many_small_batches_store_the_same_rows_as_one_batch(
    sample_archive: Path, tmp_path: Path
) -> None:
    """Batches are prepared one ahead in a worker thread; their order and content must not
    depend on how the archive is cut."""
    one, many = tmp_path / "one.duckdb", tmp_path / "many.duckdb"
    run_ingest(sample_archive, one, batch_bytes=1 << 30)
    summary = run_ingest(sample_archive, many, batch_bytes=1)  # every file its own batch

    assert summary.files_new == summary.files_seen > 2
    query = (
        "select rollout_id, seq, line_no, part_idx, record_type, item_type, role, text,"
        " payload_json from items order by rollout_id, seq"
    )
    with (
        duckdb.connect(str(one), read_only=True) as a,
        duckdb.connect(str(many), read_only=True) as b,
    ):
        assert a.execute(query).fetchall() == b.execute(query).fetchall()
        rollouts = "select * exclude (ingested_at, run_id, file_id) from rollouts order by 1"
        assert a.execute(rollouts).fetchall() == b.execute(rollouts).fetchall()
    assert counts(one) == counts(many)


def test_appending_to_one_rollout_rereads_only_it_and_adds_only_new_items(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    run_ingest(sample_archive, db)
    before = counts(db)
    target = sorted((sample_archive / "sessions").rglob("*.jsonl"))[-1]
    extra = [
        {
            "timestamp": "2026-11-01T10:00:00.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "please also add a changelog entry"}],
            },
        },
        {
            "timestamp": "2026-11-01T10:00:05.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Added it under Unreleased."}],
            },
        },
    ]
    with target.open("a", encoding="utf-8") as fh:
        for obj in extra:
            fh.write(json.dumps(obj) + "\n")

    again = run_ingest(sample_archive, db)

    assert again.files_changed == 1 and again.files_new == 0
    assert again.files_skipped == again.files_seen - 1
    after = counts(db)
    assert after["items"] == before["items"] + 2
    assert after["rollouts"] == before["rollouts"]
    assert after["files"] == before["files"]
    with duckdb.connect(str(db), read_only=True) as con:
        last = con.execute(
            "select text, updated_at from items join rollouts using (rollout_id) "
            "where rollouts.path = $p order by seq desc limit 1",
            parameters={"p": str(target)},
        ).fetchone()
    assert last[0] == "Added it under Unreleased."
    assert last[1].year == 2026 and last[1].month == 11


def write_bad_archive(root: Path) -> dict[str, str]:
    """An archive with every kind of damage; returns file -> expected reason."""
    sessions = root / "sessions" / "2026" / "01" / "02"
    sessions.mkdir(parents=True)
    meta = {
        "timestamp": "2026-01-02T03:04:05.000Z",
        "type": "session_meta",
        "payload": {"id": "", "cwd": "/work/app", "originator": "codex_cli_rs", "source": "cli"},
    }

    def session(uid: str, texts: list[str]) -> bytes:
        lines = [json.dumps({**meta, "payload": {**meta["payload"], "id": uid}})]
        for t in texts:
            lines.append(
                json.dumps(
                    {
                        "timestamp": "2026-01-02T03:04:06.000Z",
                        "type": "response_item",
                        "payload": {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": t}],
                        },
                    }
                )
            )
        return ("\n".join(lines) + "\n").encode()

    uid = "019b0000-0000-7000-8000-00000000000{}"
    (sessions / "rollout-truncated.jsonl").write_bytes(
        session(uid.format(1), ["first", "second"])
        + b'{"timestamp":"2026-01-02T03:04:07.000Z","type":"respo'
    )
    bad_utf8 = (
        session(uid.format(2), ["ok one"])
        + b'{"type":"event_msg","payload":{"message":"\xff\xfe bad"}}\n'
    )
    bad_utf8 += session(uid.format(2), ["ok two"]).split(b"\n", 1)[1]
    (sessions / "rollout-badutf8.jsonl").write_bytes(bad_utf8)
    (sessions / "rollout-empty.jsonl").write_bytes(b"")
    (sessions / "rollout-binary.jsonl").write_bytes(bytes(range(256)) * 64)
    noisy = [f"zipped {i} " + os.urandom(300).hex() for i in range(50)]
    good_gz = gzip.compress(session(uid.format(3), noisy))
    (sessions / "rollout-corrupt.jsonl.gz").write_bytes(good_gz[: len(good_gz) // 2])
    big_text = "long tool output line\n" * (50 * 1024 * 1024 // 22)
    (sessions / "rollout-huge.jsonl").write_bytes(
        session(uid.format(4), [big_text, "after the big one"])
    )
    (sessions / "rollout-array.jsonl").write_bytes(
        session(uid.format(5), ["fine"]) + b"[1, 2, 3]\n"
    )
    return {
        "rollout-truncated.jsonl": "truncated_line",
        "rollout-badutf8.jsonl": "invalid_utf8",
        "rollout-binary.jsonl": "binary_file",
        "rollout-corrupt.jsonl.gz": "corrupt_compressed",
        "rollout-array.jsonl": "not_an_object",
    }


def test_damaged_files_are_quarantined_and_their_good_lines_kept(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    expected = write_bad_archive(archive)
    db = tmp_path / "m.duckdb"

    summary = run_ingest(archive, db)

    assert summary.files_seen == 7
    with duckdb.connect(str(db), read_only=True) as con:
        got = {
            (Path(p).name, r)
            for p, r in con.execute("select path, reason from quarantine").fetchall()
        }
    # the half gzip stream also ends in the middle of a line
    assert got == set(expected.items()) | {
        ("rollout-corrupt.jsonl.gz", "truncated_line"),
        ("rollout-huge.jsonl", "line_too_long"),  # its 50 MB line; the line after is kept
    }
    assert summary.quarantined == len(got)
    with duckdb.connect(str(db), read_only=True) as con:
        user_texts = {
            Path(p).name: n
            for p, n in con.execute(
                "select r.path, count(*) from items i join rollouts r using (rollout_id) "
                "where i.item_type = 'message' group by 1"
            ).fetchall()
        }
        statuses = dict(
            (Path(p).name, s) for p, s in con.execute("select path, status from files").fetchall()
        )
        big = con.execute(
            "select length(text) from items where text like 'long tool output%' limit 1"
        ).fetchone()
    assert user_texts["rollout-truncated.jsonl"] == 2
    assert user_texts["rollout-badutf8.jsonl"] == 2
    assert user_texts["rollout-huge.jsonl"] == 1
    assert user_texts["rollout-array.jsonl"] == 1
    assert user_texts.get("rollout-corrupt.jsonl.gz", 0) >= 1  # what decompressed before the damage
    assert big is None
    with duckdb.connect(str(db), read_only=True) as con:
        ((line_no, nbytes),) = con.execute(
            "select line_no, bytes from quarantine where reason = 'line_too_long'"
        ).fetchall()
    assert line_no == 2
    assert nbytes > 50 * 1024 * 1024
    assert statuses["rollout-empty.jsonl"] == "empty"
    assert statuses["rollout-binary.jsonl"] == "binary"
    assert statuses["rollout-truncated.jsonl"] == "partial"


def test_runs_table_records_each_run_with_its_counts(sample_archive: Path, tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    first = run_ingest(sample_archive, db)
    run_ingest(sample_archive, db)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "select status, files_seen, files_new, files_skipped, rollouts, items "
            "from runs order by started_at"
        ).fetchall()
    assert rows == [
        ("succeeded", first.files_seen, first.files_seen, 0, first.rollouts, first.items),
        ("succeeded", first.files_seen, 0, first.files_seen, 0, 0),
    ]


def test_same_repository_cloned_twice_is_one_project(tmp_path: Path) -> None:
    archive = tmp_path / "archive" / "sessions"
    archive.mkdir(parents=True)
    for i, (cwd, url) in enumerate(
        [
            ("/home/a/src/app", "git@github.com:acme/app.git"),
            ("/tmp/app2", "https://github.com/acme/app"),
        ]
    ):
        meta = {
            "timestamp": "2026-01-02T03:04:05.000Z",
            "type": "session_meta",
            "payload": {
                "id": f"019b0000-0000-7000-8000-00000000001{i}",
                "cwd": cwd,
                "source": "cli",
                "git": {"repository_url": url, "branch": "main", "commit_hash": "a" * 40},
            },
        }
        (archive / f"rollout-{i}.jsonl").write_text(json.dumps(meta) + "\n")
    run_ingest(tmp_path / "archive", tmp_path / "m.duckdb")
    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        keys = con.execute("select distinct project_key from rollouts").fetchall()
    assert keys == [("github.com/acme/app",)]


def test_a_file_moved_to_archived_sessions_is_not_a_second_rollout(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    first = run_ingest(sample_archive, db)
    src = sorted((sample_archive / "sessions").rglob("rollout-*.jsonl"))[0]
    dest = sample_archive / "archived_sessions" / src.name
    dest.parent.mkdir()
    shutil.copy2(src, dest)
    os.utime(dest, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 1))

    second = run_ingest(sample_archive, db)

    assert second.files_new == 1
    with duckdb.connect(str(db), read_only=True) as con:
        n = con.execute("select count(*) from rollouts").fetchone()[0]
        dup = con.execute(
            "select reason from quarantine where path = $p", parameters={"p": str(dest)}
        )
        assert dup.fetchall() == [("duplicate_rollout",)]
    assert n == first.rollouts


def test_a_file_that_cannot_be_opened_keeps_what_was_stored_and_is_read_again(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memkiln.io import archive, loader

    db = tmp_path / "m.duckdb"
    run_ingest(sample_archive, db)
    before = counts(db)
    files = sorted((sample_archive / "sessions").rglob("*.jsonl"))
    grown, new = files[-1], files[-1].with_name("rollout-2026-11-02T10-00-00-new.jsonl")
    shutil.copy(files[0], new)  # a session file nobody stored yet
    append_user_turn(grown, "one more turn after the resume")
    locked = {str(grown), str(new)}

    def read_or_refuse(stat: archive.FileStat, **limits: int) -> archive.FileBytes:
        if stat.path in locked:
            return archive.FileBytes(stat, b"", "unreadable_file", "PermissionError: denied")
        return archive.read_file(stat, **limits)

    monkeypatch.setattr(loader, "read_file", read_or_refuse)
    refused = run_ingest(sample_archive, db)

    assert refused.files_failed == 2 and refused.statuses.get("unreadable") == 2
    assert counts(db)["items"] == before["items"]  # the grown file's earlier items are kept
    with duckdb.connect(str(db), read_only=True) as con:
        reasons = con.execute(
            "select reason, count(*) from quarantine where path = any($p) group by 1",
            parameters={"p": sorted(locked)},
        ).fetchall()
    assert reasons == [("unreadable_file", 2)]

    monkeypatch.undo()  # readable again, fingerprints unchanged since the failed run
    again = run_ingest(sample_archive, db)

    assert again.files_failed == 0 and again.files_changed + again.files_new == 2
    with duckdb.connect(str(db), read_only=True) as con:
        turn = con.execute(
            "select count(*) from items where text like '%one more turn after the resume%'"
        ).fetchone()[0]
        statuses = con.execute(
            "select status from files where path = any($p)", parameters={"p": sorted(locked)}
        ).fetchall()
    assert turn == 1
    assert sorted(s for (s,) in statuses) == ["duplicate", "ok"]  # the copy holds a stored session


def test_a_line_with_a_string_cut_through_an_emoji_is_kept(
    sample_archive: Path, tmp_path: Path
) -> None:
    target = sorted((sample_archive / "sessions").rglob("*.jsonl"))[-1]
    cut = "build ok 🎉 done".encode("utf-16-le")[:20].decode("utf-16-le", "surrogatepass")
    append_user_turn(target, cut)
    assert '\\ud83c"' in target.read_text(encoding="utf-8")

    run_ingest(sample_archive, tmp_path / "m.duckdb")

    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        texts = con.execute("select text from items where text like 'build ok %'").fetchall()
        bad = con.execute(
            "select count(*) from quarantine where path = $p", parameters={"p": str(target)}
        ).fetchone()[0]
    assert texts == [("build ok \ufffd",)] and bad == 0


def test_a_session_with_a_zero_filled_tail_keeps_its_good_lines(
    sample_archive: Path, tmp_path: Path
) -> None:
    target = min(
        (sample_archive / "sessions").rglob("*.jsonl"), key=lambda p: p.stat().st_size
    )  # a small file: the zeros fall within its first 64 KiB
    good_lines = target.read_bytes().count(b"\n")
    with target.open("ab") as fh:
        fh.write(b"\x00" * 4096)  # what a crash can leave after the last write

    run_ingest(sample_archive, tmp_path / "m.duckdb")

    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        status, rollout = con.execute(
            "select status, rollout_id from files where path = $p", parameters={"p": str(target)}
        ).fetchone()
        reasons = con.execute(
            "select reason from quarantine where path = $p", parameters={"p": str(target)}
        ).fetchall()
    assert good_lines > 1 and target.stat().st_size < 65536
    assert (status, reasons) == ("partial", [("truncated_line",)]) and rollout is not None


def test_an_archive_moved_elsewhere_hands_its_sessions_to_the_new_paths(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    first = run_ingest(sample_archive, db)
    moved = tmp_path / "moved-archive"
    sample_archive.rename(moved)
    grown = sorted((moved / "sessions").rglob("*.jsonl"))[-1]
    append_user_turn(grown, "a new turn after the move")

    second = run_ingest(moved, db)

    assert second.rollouts == first.rollouts and second.statuses.get("duplicate", 0) == 0
    with duckdb.connect(str(db), read_only=True) as con:
        paths = [p for (p,) in con.execute("select path from rollouts").fetchall()]
        turn = con.execute(
            "select count(*) from items where text = 'a new turn after the move'"
        ).fetchone()[0]
        old = dict(
            con.execute(
                "select status, count(*) from files where path like $p group by 1",
                parameters={"p": str(sample_archive) + "/%"},
            ).fetchall()
        )
        orphans = con.execute(
            "select count(*) from items where rollout_id not in (select rollout_id from rollouts)"
        ).fetchone()[0]
    assert len(paths) == first.rollouts and all(p.startswith(str(moved)) for p in paths)
    assert turn == 1 and orphans == 0
    assert old.get("moved") == first.rollouts


def test_files_handled_in_parts_store_the_same_rows_as_in_one_part(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file larger than PARSE_PART_BYTES is cleaned, parsed and normalized part by part (so
    memory does not follow the largest file); the rows must not depend on where it is cut."""
    import memkiln.io.loader as loader

    whole, parts = tmp_path / "whole.duckdb", tmp_path / "parts.duckdb"
    run_ingest(sample_archive, whole)
    # a few lines per part: every file over 12 KB is cut, the largest (166 KB)
    # into 14 parts
    monkeypatch.setattr(loader, "PARSE_PART_BYTES", 12_000)
    monkeypatch.setattr(loader, "PART_BYTES", 12_000)
    run_ingest(sample_archive, parts)

    queries = [
        "select * exclude (file_id) from items order by rollout_id, seq",
        "select * exclude (ingested_at, run_id, file_id) from rollouts order by rollout_id",
        "select line_no, reason, excerpt, bytes from quarantine order by path, line_no",
        "select path, format, status, lines, quarantined from files order by path",
    ]
    with (
        duckdb.connect(str(whole), read_only=True) as a,
        duckdb.connect(str(parts), read_only=True) as b,
    ):
        for query in queries:
            assert a.execute(query).fetchall() == b.execute(query).fetchall(), query


def test_each_item_stores_its_text_once_and_its_payload_keeps_the_other_fields(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    run_ingest(sample_archive, db)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql(
            "select r.format, i.item_type, i.call_id, i.text, i.payload_json "
            "from items i join rollouts r using (rollout_id)"
        ).fetchall()
    long_texts = 0
    for fmt, item_type, call_id, text, payload in rows:
        if payload is not None:
            json.loads(payload)  # still one JSON value
        if text is None or len(text) < 40 or payload is None:
            continue
        long_texts += 1
        encoded = json.dumps(text, ensure_ascii=False)[1:-1]
        assert encoded not in payload, (fmt, item_type, payload[:200])
        # what is not the text stays in the payload (a Pi tool result's payload is its
        # content block, whose call id is on the message line)
        if call_id is not None and (item_type == "function_call" or fmt != "pi"):
            assert call_id in payload
    assert long_texts > 100
    # the long texts are in text, so payloads are the smaller part of what is stored
    assert sum(len(p or "") for *_, p in rows) < sum(len(t or "") for *_, t, _ in rows)


def test_a_prepared_batch_crosses_processes_as_arrow_ipc_unchanged(sample_archive: Path) -> None:
    import pickle

    import polars as pl
    from polars.testing import assert_frame_equal

    from memkiln.io.archive import discover
    from memkiln.io.loader import PreparedBatch, frame_to_ipc, prepare_batch_ipc

    stats = list(discover(sample_archive))
    batch = pl.DataFrame(
        {
            "path": [s.path for s in stats],
            "size": [s.size for s in stats],
            "mtime_ns": [s.mtime_ns for s in stats],
            "file_id": list(range(1, len(stats) + 1)),
            "action": ["new"] * len(stats),
        }
    )
    sent = pickle.dumps(prepare_batch_ipc(frame_to_ipc(batch)))  # what Dask sends back
    back = PreparedBatch.from_ipc(pickle.loads(sent))
    payload = pickle.loads(sent)
    assert all(isinstance(raw, bytes) for raw in payload["frames"].values())  # no pickled rows
    assert back.norm.items.height > 300 and back.norm.rollouts.height == 8
    again = PreparedBatch.from_ipc(back.to_ipc())
    assert_frame_equal(again.norm.items, back.norm.items)
    assert_frame_equal(again.files, back.files)
    assert again.norm.hits == back.norm.hits and again.bytes_read == back.bytes_read
