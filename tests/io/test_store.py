"""The DuckDB store: migrations, run records, errors a user can fix."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from memkiln.errors import StoreError
from memkiln.io.run_records import recorded_run
from memkiln.io.store import open_store, schema_files


def test_opening_twice_applies_each_schema_file_once(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    open_store(db).close()
    open_store(db).close()
    with duckdb.connect(str(db), read_only=True) as con:
        versions = [
            v for (v,) in con.execute("select version from schema_migrations order by 1").fetchall()
        ]
        views = {
            n
            for (n,) in con.execute(
                "select view_name from duckdb_views() where not internal"
            ).fetchall()
        }
    assert versions == [v for v, _, _ in schema_files()]
    assert {
        "v_rollouts",
        "v_projects",
        "v_runs",
        "v_extraction_outcomes",
        "v_stage1_status",
    } <= views


def test_a_database_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    open_store(db).close()
    with duckdb.connect(str(db)) as con:
        con.execute("insert into schema_migrations (version, name) values (9999, 'future')")
    with pytest.raises(StoreError, match="newer memkiln"):
        open_store(db)


def test_a_failed_run_is_recorded_with_its_error_redacted(tmp_path: Path) -> None:
    con = open_store(tmp_path / "m.duckdb")
    try:
        with pytest.raises(RuntimeError), recorded_run(con, command="extract") as run_id:
            raise RuntimeError("upstream said: invalid key sk-proj-" + "Ab3" * 16)
        status, error = con.execute(
            "select status, error from runs where run_id = $r", {"r": run_id}
        ).fetchall()[0]
    finally:
        con.close()
    assert status == "failed"
    assert "RuntimeError" in error and "[REDACTED_SECRET]" in error and "Ab3Ab3" not in error


def test_a_transaction_that_raises_leaves_nothing_behind(tmp_path: Path) -> None:
    import polars as pl

    from memkiln.io.store import transaction

    con = open_store(tmp_path / "m.duckdb")
    try:
        frame = pl.DataFrame({"rule_id": ["r1"], "hits": [3]})
        with pytest.raises(RuntimeError), transaction(con, batch=frame):
            con.execute(
                "insert into redaction_hits select 'run', 'ingest', rule_id, hits from batch"
            )
            raise RuntimeError("half way")
        assert con.execute("select count(*) from redaction_hits").fetchall() == [(0,)]
        with pytest.raises(duckdb.CatalogException):
            con.execute("select * from batch")  # the frame is no longer registered
        with transaction(con, batch=frame):
            con.execute(
                "insert into redaction_hits select 'run', 'ingest', rule_id, hits from batch"
            )
        assert con.execute("select count(*) from redaction_hits").fetchall() == [(1,)]
    finally:
        con.close()


def test_views_are_created_once_and_again_when_missing_or_changed(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    open_store(db).close()
    con = open_store(db)
    try:
        first = con.execute("select digest, created_at from schema_views").fetchall()
        assert len(first) == 1
    finally:
        con.close()
    con = open_store(db)  # nothing changed: the views are not created again
    try:
        assert con.execute("select digest, created_at from schema_views").fetchall() == first
        con.execute("drop view v_runs")
    finally:
        con.close()
    con = open_store(db)  # a view is missing: created again
    try:
        assert con.execute("select count(*) from v_runs").fetchall() == [(0,)]
        again = con.execute("select created_at from schema_views").fetchall()
        assert again != [(first[0][1],)]
        con.execute("update schema_views set digest = 'older view files'")
        con.execute("create or replace view v_runs as select 1 as stale")
    finally:
        con.close()
    con = open_store(db)  # the view files changed: every view is created from them again
    try:
        assert "stale" not in [d[0] for d in con.execute("select * from v_runs").description]
        assert con.execute("select digest from schema_views").fetchall() == [(first[0][0],)]
    finally:
        con.close()
