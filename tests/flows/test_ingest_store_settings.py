"""The store's connection during an ingest: DuckDB's memory limit and thread count for it
(``INGEST_DUCKDB_MEMORY``, ``INGEST_DUCKDB_THREADS``), as each batch is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from memkiln.constants import INGEST_DUCKDB_THREADS
from memkiln.flows import plain_ingest
from memkiln.flows.ingest import ingest_archive
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
