"""``memkiln.connect``: readers open the published copy of the store, never the store, so a
reader and a run never block each other."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

import memkiln
from memkiln.errors import StoreError
from memkiln.io.snapshot import Publisher, publish, snapshot_path
from memkiln.io.store import open_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings


def _ingest(archive: Path, db: Path) -> None:
    ingest_archive(Settings(archive=archive, db=db, progress=False, prefect=False))


def test_connect_reads_the_last_run_with_views_and_cannot_write(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    _ingest(sample_archive, db)
    con = memkiln.connect(db)
    try:
        assert con.execute("select count(*) from items").fetchone()[0] > 0  # type: ignore[index]
        assert con.execute("select count(*) from v_projects").fetchone()[0] > 0  # type: ignore[index]
        runs = con.execute("select command, status from v_runs").fetchall()
        assert runs == [("ingest", "succeeded")]  # the state at the end of the run
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("delete from items")
    finally:
        con.close()


def test_a_reader_holding_a_connection_neither_stops_a_run_nor_sees_a_torn_state(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    _ingest(sample_archive, db)
    held = memkiln.connect(db)
    try:
        before = held.execute("select count(*) from runs").fetchone()[0]  # type: ignore[index]
        for path in list(sample_archive.rglob("*.jsonl"))[:2]:  # two files change
            with path.open("a") as f:
                f.write("\n")
        _ingest(sample_archive, db)  # the store is written while the reader holds its copy
        _ingest(sample_archive, db)
        # the held connection keeps the state it opened with ...
        assert held.execute("select count(*) from runs").fetchone()[0] == before  # type: ignore[index]
        # ... and a new one sees the runs since, while the old one is still open
        fresh = memkiln.connect(db)
        try:
            assert fresh.execute("select count(*) from runs").fetchone()[0] == before + 2  # type: ignore[index]
        finally:
            fresh.close()
    finally:
        held.close()


def test_a_publish_replaces_the_copy_by_rename_never_in_place(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    con = open_store(db)
    try:
        killed = tmp_path / "m.duckdb.snapshot.tmp-99999"  # a killed run's half copy
        killed.write_bytes(b"half")
        publish(con)
        first = snapshot_path(db).stat().st_ino
        with snapshot_path(db).open("rb") as old:  # a reader's open file
            content = old.read()
            con.execute("insert into schema_migrations values (9999, 'x', now())")
            publish(con)
            old.seek(0)
            assert old.read() == content
        assert snapshot_path(db).stat().st_ino != first
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    finally:
        con.close()
    reader = memkiln.connect(db)
    try:
        versions = {
            row[0] for row in reader.execute("select version from schema_migrations").fetchall()
        }
        assert 9999 in versions
    finally:
        reader.close()


def test_a_store_never_published_is_published_by_its_first_reader(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    open_store(db).close()  # a store written before readers had their copy
    assert not snapshot_path(db).exists()
    con = memkiln.connect(db)
    try:
        assert con.execute("select count(*) from rollouts").fetchone()[0] == 0  # type: ignore[index]
    finally:
        con.close()
    assert snapshot_path(db).exists()


def test_connect_to_a_missing_database_says_so_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nope.duckdb"
    with pytest.raises(StoreError, match="no database"):
        memkiln.connect(db)
    assert not os.listdir(tmp_path)


def test_connect_without_a_path_opens_the_configured_database(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.duckdb"
    _ingest(sample_archive, db)
    monkeypatch.setenv("MEMKILN_DB", str(db))
    con = memkiln.connect()
    try:
        assert con.execute("select count(*) from rollouts").fetchone()[0] == 8  # type: ignore[index]
    finally:
        con.close()


def test_a_copy_waits_for_the_threads_using_the_store_and_is_skipped_while_one_is(
    tmp_path: Path,
) -> None:
    db = tmp_path / "m.duckdb"
    con = open_store(db)
    try:
        publisher = Publisher(con)
        publisher._last = 0.0  # due
        with publisher.using():
            assert publisher.maybe() is False  # a worker is writing: a later point publishes
        assert not snapshot_path(db).exists()
        assert publisher.maybe() is True
        assert snapshot_path(db).exists()
        assert publisher.maybe() is False  # not due again yet
    finally:
        con.close()


@pytest.mark.parametrize("kernel", ["copy_file_range", "read and write"])
def test_the_readers_copy_holds_every_byte_whichever_way_it_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    from memkiln.io import snapshot

    source = tmp_path / "store.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)  # not a multiple of any buffer size
    source.write_bytes(data)
    if kernel != "copy_file_range":

        def refuse(*_: object) -> int:
            raise OSError(38, "Function not implemented")  # ENOSYS: an old kernel

        monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    dest = tmp_path / "copy.bin"
    snapshot._copy(source, dest)
    assert dest.read_bytes() == data


def test_a_kernel_copy_that_fails_midway_is_an_error_not_a_short_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memkiln.io import snapshot

    source = tmp_path / "store.bin"
    source.write_bytes(b"x" * 4096)
    real = os.copy_file_range
    calls = []

    def fail_second(src: int, dst: int, count: int, *rest: object) -> int:
        calls.append(count)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(src, dst, 1000)

    monkeypatch.setattr(os, "copy_file_range", fail_second)
    with pytest.raises(OSError, match="No space"):
        snapshot._copy(source, tmp_path / "copy.bin")
