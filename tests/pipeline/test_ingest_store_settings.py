"""DuckDB's settings during an ingest: the store's connection's memory limit and thread count
(``INGEST_DUCKDB_MEMORY``, ``INGEST_DUCKDB_THREADS``) as each batch is written, and the
parser connection's thread count as each batch is prepared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from memkiln.constants import INGEST_DUCKDB_THREADS, PARSER_DUCKDB_THREADS
from memkiln.io import loader
from memkiln.pipeline import ingest as plain_ingest
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings


def test_each_batch_is_written_with_the_ingest_settings_of_duckdb(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Any, ...]] = []
    write = plain_ingest.write_batch

    def spy(con: duckdb.DuckDBPyConnection, *args: Any, **kwargs: Any) -> Any:
        rows = con.execute(
            "select current_setting('threads'), current_setting('memory_limit')"
        ).fetchall()
        seen.append(tuple(rows[0]))
        return write(con, *args, **kwargs)

    monkeypatch.setattr(plain_ingest, "write_batch", spy)
    summary = ingest_archive(
        Settings(archive=sample_archive, db=tmp_path / "m.duckdb", progress=False, prefect=False)
    )
    assert summary.items > 0 and seen
    assert {threads for threads, _ in seen} == {INGEST_DUCKDB_THREADS}
    assert {limit for _, limit in seen} == {"244.1 MiB"}  # 256MB, as DuckDB shows it


def test_each_batch_is_parsed_on_the_parser_threads(
    sample_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-memory connection that parses a batch's JSON runs on ``PARSER_DUCKDB_THREADS``
    (one): with two, the prepare step's peak memory was about 130 MB higher."""
    seen: list[int] = []
    prepare = loader.prepare_batch

    def spy(parser: duckdb.DuckDBPyConnection, *args: Any, **kwargs: Any) -> Any:
        seen.append(parser.execute("select current_setting('threads')").fetchall()[0][0])
        return prepare(parser, *args, **kwargs)

    monkeypatch.setattr(loader, "prepare_batch", spy)
    summary = ingest_archive(
        Settings(archive=sample_archive, db=tmp_path / "m.duckdb", progress=False, prefect=False)
    )
    assert summary.items > 0 and seen
    assert set(seen) == {PARSER_DUCKDB_THREADS} == {1}
