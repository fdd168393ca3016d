"""The readers' copy opens in DuckDB 1.x (the DuckDB CLI, DBeaver, any tool on DuckDB 1.4+)
and every view answers there.

The DuckDB 1.5 tests run the real DuckDB 1.5 in a separate environment, a subprocess of
``.venv-duckdb1/bin/python`` (``.ci/run`` makes it) or of ``MEMKILN_TEST_DUCKDB1_PYTHON``;
they are skipped, saying so, when neither exists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

from memkiln.io.snapshot import publish, snapshot_path
from memkiln.io.store import open_store, view_files
from tests.sample_db import REPO, SampleDb, shared_sample_db


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def _duckdb1_python() -> Path:
    given = os.environ.get("MEMKILN_TEST_DUCKDB1_PYTHON")
    python = Path(given) if given else REPO / ".venv-duckdb1" / "bin" / "python"
    if not python.exists():
        pytest.skip(
            f"no DuckDB 1.x environment at {python} (.ci/run makes it: "
            "python3 -m venv .venv-duckdb1 && .venv-duckdb1/bin/pip install 'duckdb==1.5.*')"
        )
    return python


#: Run in the DuckDB 1.x environment: open the file read-only, read every view given.
_READ_VIEWS = """
import json, sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
out = {"version": duckdb.__version__, "views": {}}
for name in sys.argv[2:]:
    try:
        # every column computed in DuckDB (fetching TIMESTAMPTZ into Python needs pytz there)
        con.execute("create or replace temp table answer as select * from " + name)
        out["views"][name] = con.execute("select count(*) from answer").fetchall()[0][0]
    except duckdb.Error as exc:
        out["views"][name] = "error: " + str(exc).splitlines()[0]
out["tables"] = sorted(r[0] for r in con.execute("select table_name from duckdb_tables()").fetchall())
print(json.dumps(out))
"""


def _read_in_duckdb1(python: Path, path: Path) -> dict[str, object]:
    views = [name.removesuffix(".sql") for name, _ in view_files()]
    done = subprocess.run(
        [str(python), "-c", _READ_VIEWS, str(path), *views],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _views_in_duckdb2(path: Path) -> dict[str, int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            name.removesuffix(".sql"): len(
                con.execute("select * from " + name.removesuffix(".sql")).fetchall()
            )
            for name, _ in view_files()
        }
    finally:
        con.close()


def _storage_version(path: Path) -> str:
    con = duckdb.connect(":memory:")
    try:
        literal = "'" + str(path).replace("'", "''") + "'"
        con.execute(f"attach {literal} as f (read_only)")
        row = con.execute(
            "select tags['storage_version'] from duckdb_databases() where database_name = 'f'"
        ).fetchone()
        assert row is not None
        return str(row[0])
    finally:
        con.close()


def _store_in_duckdb2_format(source: Path, dest: Path) -> None:
    """A copy of the store ``source`` in DuckDB 2's own format (69), as memkiln wrote stores
    before it chose the readers' format."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"attach '{source}' as src (read_only)")
        con.execute(f"attach '{dest}' as dst (storage_version 'latest')")
        con.execute("copy from database src to dst")
    finally:
        con.close()


def test_a_new_store_and_its_readers_copy_are_in_a_format_duckdb_1_4_opens(
    sample_db: SampleDb,
) -> None:
    assert _storage_version(sample_db.db) == "v1.4.0+"
    assert _storage_version(snapshot_path(sample_db.db)) == "v1.4.0+"


def test_a_store_in_duckdb_2_format_publishes_a_readers_copy_in_the_1_4_format(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    db = tmp_path / "old.duckdb"
    _store_in_duckdb2_format(sample_db.db, db)
    assert _storage_version(db) == "v2.0.0+"
    con = open_store(db)
    try:
        publish(con)
    finally:
        con.close()
    copy = snapshot_path(db)
    assert _storage_version(copy) == "v1.4.0+"
    assert _storage_version(db) == "v2.0.0+"  # the store itself is left as it was
    # the copy holds what the store holds: every view gives the same number of rows
    assert _views_in_duckdb2(copy) == _views_in_duckdb2(db)


def test_duckdb_1_5_opens_the_readers_copy_and_every_view_answers(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    python = _duckdb1_python()
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(snapshot_path(sample_db.db), copy)
    result = _read_in_duckdb1(python, copy)
    assert str(result["version"]).startswith("1.")
    assert result["views"] == _views_in_duckdb2(copy)  # every view, the same rows, no error
    assert "items" in result["tables"]  # type: ignore[operator]


def test_duckdb_1_5_opens_the_readers_copy_of_a_store_in_duckdb_2_format(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    python = _duckdb1_python()
    db = tmp_path / "old.duckdb"
    _store_in_duckdb2_format(sample_db.db, db)
    con = open_store(db)
    try:
        publish(con)
    finally:
        con.close()
    result = _read_in_duckdb1(python, snapshot_path(db))
    assert result["views"] == _views_in_duckdb2(db)
