"""``v_projects`` and ``memkiln projects`` are one source: the same rows, values and order
(no NULL memories in one and 0 in the other, no 128-bit sums)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import memkiln
from memkiln.io.status import _fetch, project_list
from memkiln.io.store import open_store, sql
from tests.sample_db import SampleDb, shared_sample_db


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def test_memkiln_projects_prints_exactly_the_rows_of_v_projects_in_its_order(
    sample_db: SampleDb,
) -> None:
    con = memkiln.connect(sample_db.db)
    try:
        view = _fetch(con, "select * from v_projects")
        types = dict(con.execute("select column_name, data_type from duckdb_columns() "
                                 "where table_name = 'v_projects'").fetchall())  # fmt: skip
    finally:
        con.close()
    assert view and project_list(sample_db.db) == view
    done = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", "projects", "--json", "--db", str(sample_db.db)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == view
    assert types["items"] == types["memories"] == types["sessions"] == "BIGINT"


def test_a_project_never_consolidated_has_0_memories_in_the_view_and_the_list() -> None:
    con = open_store(":memory:")
    con.execute(
        "insert into rollouts (rollout_id, file_id, path, format, project_key, updated_at, "
        "n_lines, n_items, n_user_messages, n_tool_calls, n_quarantined, omitted_bytes, "
        "ingested_at, run_id) "
        "values ('r1', 1, 'a.jsonl', 'codex', 'github.com/a/b', now(), 5, 3, 1, 0, 0, 0, "
        "now(), 'run')"
    )
    rows = con.execute("select project_key, memories, items from v_projects").fetchall()
    assert rows == [("github.com/a/b", 0, 3)]
    assert con.execute(sql("project_list")).fetchall() == con.execute("from v_projects").fetchall()
    con.close()
