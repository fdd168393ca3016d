"""The schema is documented inside the database, and sql/README.md is generated from it."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from memkiln.io import schema_docs
from memkiln.io.store import migrate, open_store
from tests.sample_db import SampleDb, shared_sample_db


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def _undocumented(con: duckdb.DuckDBPyConnection) -> list[str]:
    relations = con.execute(
        "select table_name, comment from duckdb_tables() where not internal and not temporary "
        "union all "
        "select view_name, comment from duckdb_views() where not internal and not temporary"
    ).fetchall()
    missing = [f"{name} (the relation)" for name, comment in relations if not comment]
    names = [name for name, _ in relations]
    cols = con.execute(
        "select table_name, column_name from duckdb_columns() "
        "where table_name = any($names) and (comment is null or trim(comment) = '')",
        {"names": names},
    ).fetchall()
    return missing + [f"{t}.{c}" for t, c in cols]


def test_every_table_view_and_column_of_a_fresh_database_has_a_comment() -> None:
    con = duckdb.connect(":memory:")
    migrate(con)
    n_rel = (
        con.execute("select count(*) from duckdb_tables() where not internal").fetchall()[0][0]
        + con.execute("select count(*) from duckdb_views() where not internal").fetchall()[0][0]
    )
    assert n_rel >= 20
    assert _undocumented(con) == []


def test_every_column_of_the_sample_database_has_a_comment_when_read_read_only(
    sample: SampleDb,
) -> None:
    con = duckdb.connect(str(sample.db), read_only=True)
    try:
        assert _undocumented(con) == []
        views = {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
        assert {"v_tool_calls", "v_coverage", "v_costs", "v_redactions"} <= views
    finally:
        con.close()


def test_a_database_made_before_the_comments_gets_them_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    """An existing database (migrations up to 0015 applied) is brought up to date."""
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    from memkiln.io.store import schema_files

    con.execute(schema_files()[0][2])
    for version, name, text in schema_files():
        if version >= 20:
            break
        con.execute(text)
        con.execute(
            "insert or ignore into schema_migrations (version, name) values (?, ?)", [version, name]
        )
    con.execute(
        "insert into files values (1, 'k', '/a.jsonl', 'codex', 'none', 10, 123, 'h', 'ok', "
        "'r1', 1, 0, now(), now(), 'run0')"
    )
    con.close()
    store = open_store(db)
    try:
        assert _undocumented(store) == []
        # the file is read again by the next ingest, which fills tool_calls
        assert store.execute("select mtime_ns from files").fetchall() == [(-1,)]
    finally:
        store.close()


def test_the_committed_sql_readme_is_what_the_script_generates() -> None:
    committed = schema_docs.README.read_text(encoding="utf-8")
    assert committed == schema_docs.generate(), (
        "memkiln/sql/README.md is out of date: run python -m memkiln.io.schema_docs"
    )


def test_the_readme_describes_every_column() -> None:
    text = schema_docs.generate()
    assert "### tool_calls" in text and "### v_tool_calls" in text
    assert "| `failed` | BOOLEAN | True when the result is marked an error" in text
