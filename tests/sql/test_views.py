"""The views for notebooks, on the database the README's first command produces."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import duckdb
import pytest

from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.sample_db import SampleDb, shared_sample_db

NEW_VIEWS = ("v_sessions_daily", "v_tool_calls", "v_coverage", "v_costs", "v_redactions", "v_runs")
#: Views of a step the README's first command does not take (memkiln publish: its rows are
#: checked in tests/cli/test_publish.py).
NOT_IN_THE_SAMPLE = ("v_publications",)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


@pytest.fixture
def con(sample: SampleDb) -> Iterator[duckdb.DuckDBPyConnection]:
    c = duckdb.connect(str(sample.db), read_only=True)
    yield c
    c.close()


def one(con: duckdb.DuckDBPyConnection, query: str) -> object:
    return con.execute(query).fetchall()[0][0]


def test_each_view_file_creates_the_view_it_is_named_after() -> None:
    files = [
        e
        for e in (resources.files("memkiln") / "sql" / "views").iterdir()
        if e.name.endswith(".sql")
    ]
    for entry in files:
        created = re.findall(r"create or replace view (\w+)", entry.read_text("utf-8"))
        assert created == [entry.name[:-4]], entry.name
    assert {e.name[:-4] for e in files} >= set(NEW_VIEWS)


def test_every_view_returns_rows_on_the_sample_database(con: duckdb.DuckDBPyConnection) -> None:
    views = [
        r[0]
        for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()
    ]
    assert set(NEW_VIEWS) <= set(views)
    empty = [
        v
        for v in views
        if v not in NOT_IN_THE_SAMPLE and one(con, f"select count(*) from {v}") == 0
    ]
    assert empty == []
    # the sample archive has no unreadable input: every reason is listed, at 0
    zero = con.execute(
        "select count(*), sum(entries) from v_quarantine_by_reason where path = '(all files)'"
    ).fetchone()
    assert zero == (14, 0)


def test_v_quarantine_by_reason_returns_the_bad_lines_of_an_archive(tmp_path: Path) -> None:
    archive, db = tmp_path / "archive", tmp_path / "m.duckdb"
    path = (
        archive
        / "sessions/2026/01/01/rollout-2026-01-01T10-00-00-019b0000-0000-7000-8000-0000000000bb.jsonl"
    )
    path.parent.mkdir(parents=True)
    meta = {
        "timestamp": "2026-01-01T10:00:00Z",
        "type": "session_meta",
        "payload": {"id": "019b0000-0000-7000-8000-0000000000bb", "cwd": "/w", "source": "cli"},
    }
    path.write_text(json.dumps(meta) + "\n{not json\n[1, 2]\n")
    ingest_archive(
        Settings(archive=archive, db=db, out=tmp_path / "out", prefect=False, progress=False)
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        reasons = {
            r[0]
            for r in con.execute(
                "select reason from v_quarantine_by_reason where path <> '(all files)'"
            ).fetchall()
        }
        totals = dict(
            con.execute(
                "select reason, entries from v_quarantine_by_reason where path = '(all files)'"
            ).fetchall()
        )
    finally:
        con.close()
    assert reasons == {"invalid_json", "not_an_object"}
    assert totals["invalid_json"] == 1 and totals["not_an_object"] == 1
    assert totals["truncated_line"] == 0 and len(totals) == 14


def test_v_sessions_daily_counts_every_session_once_per_day_project_and_source(
    con: duckdb.DuckDBPyConnection,
) -> None:
    assert one(con, "select sum(sessions) from v_sessions_daily") == one(
        con, "select count(*) from rollouts"
    )
    assert one(con, "select sum(items) from v_sessions_daily") == one(
        con, "select sum(n_items) from rollouts"
    )
    assert {
        r[0] for r in con.execute("select distinct format from v_sessions_daily").fetchall()
    } == {"codex", "claude", "pi"}
    dupes = con.execute(
        "select day, project_key, format, source from v_sessions_daily group by all having count(*) > 1"
    ).fetchall()
    assert dupes == []


def test_v_tool_calls_has_every_call_of_every_format_with_its_project(
    con: duckdb.DuckDBPyConnection,
) -> None:
    assert one(con, "select count(*) from v_tool_calls") == one(
        con, "select sum(n_tool_calls) from rollouts"
    )
    assert {r[0] for r in con.execute("select distinct format from v_tool_calls").fetchall()} == {
        "codex",
        "claude",
        "pi",
    }
    assert one(con, "select count(*) from v_tool_calls where project_key is null") == 0
    # the sample's Pi session has a read of a missing file, marked an error
    assert one(con, "select count(*) from v_tool_calls where failed and format = 'pi'") >= 1
    # Codex shell outputs state their exit code and wall time
    assert (
        one(
            con,
            "select count(*) from v_tool_calls where format = 'codex' and exit_code is not null",
        )
        >= 1
    )
    assert one(con, "select count(*) from v_tool_calls where duration_ms is not null") >= 1


def test_v_coverage_accounts_for_every_session_of_every_project(
    con: duckdb.DuckDBPyConnection,
) -> None:
    row = con.execute(
        "select sum(sessions), sum(eligible), sum(extracted), sum(no_output), sum(failed), sum(pending), "
        "sum(not_selected), sum(skipped_subagent + skipped_memory_disabled + skipped_no_user_message) from v_coverage"
    ).fetchall()[0]
    sessions, eligible, extracted, no_output, failed, pending, not_selected, skipped = row
    assert sessions == one(con, "select count(*) from rollouts") == eligible + skipped
    assert eligible == extracted + no_output + failed + pending + not_selected
    assert extracted == one(con, "select count(*) from stage1_jobs where status = 'succeeded'")
    assert one(con, "select sum(skipped_subagent) from v_coverage") == one(
        con, "select count(*) from rollouts where is_subagent"
    )
    assert one(con, "select count(*) from v_coverage") == one(
        con, "select count(distinct coalesce(project_key, '')) from rollouts"
    )


def test_v_costs_counts_every_extraction_attempt_and_each_consolidation(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # attempts, named so: not the model requests the run summary counts (model_usage)
    columns = {r[0] for r in con.execute("describe v_costs").fetchall()}
    assert {"attempts", "failed_attempts"} <= columns and "requests" not in columns
    assert one(con, "select sum(attempts) from v_costs where phase = 'extract'") == one(
        con, "select count(*) from stage1_attempts"
    )
    assert one(con, "select sum(attempts) from v_costs where phase = 'consolidate'") == one(
        con, "select count(*) from runs where command = 'consolidate'"
    )
    assert one(con, "select sum(cost_usd) from v_costs") == one(
        con, "select sum(cost_usd) from stage1_attempts"
    ) + one(con, "select coalesce(sum(cost_usd), 0) from runs where command = 'consolidate'")
    assert {
        r[0]
        for r in con.execute(
            "select distinct backend from v_costs where phase = 'extract'"
        ).fetchall()
    } == {"heuristic"}


def test_v_tool_calls_names_a_kind_of_tool_alike_across_the_three_formats(
    con: duckdb.DuckDBPyConnection,
) -> None:
    kinds = dict(
        con.execute("select tool, any_value(tool_kind) from v_tool_calls group by tool").fetchall()
    )
    # Claude Code's Bash, Pi's bash, Codex's shell, exec_command and shell_command
    assert {kinds[t] for t in ("Bash", "bash", "shell", "exec_command", "shell_command")} == {
        "shell"
    }
    assert kinds["update_plan"] == kinds["set_phase"] == "plan"
    assert kinds["grep"] == kinds["find"] == "search files"


def test_v_runs_groups_the_phases_of_a_run_under_it(con: duckdb.DuckDBPyConnection) -> None:
    runs = con.execute(
        "select run_id, group_id, is_phase, command, phases, phases_not_succeeded from v_runs"
    ).fetchall()
    (parent,) = [r for r in runs if r[3] == "run"]
    assert parent[1] == parent[0] and not parent[2]
    assert parent[4] == "ingest:succeeded, extract:succeeded, consolidate:succeeded"
    assert parent[5] == 0
    phases = [r for r in runs if r[2]]
    assert sorted(r[3] for r in phases) == ["consolidate", "extract", "ingest"]
    assert {r[1] for r in phases} == {parent[0]}


def test_v_redactions_counts_hits_per_rule_and_day_and_a_total_for_each_ingest_day(
    tmp_path: Path,
) -> None:
    archive, db = tmp_path / "archive", tmp_path / "m.duckdb"
    secret = "ghp_" + "x7Kq2Lm9Np4Rs8Tv1Wy5Za3Bc6De0Fg2Hj4"
    path = (
        archive
        / "sessions/2026/01/01/rollout-2026-01-01T10-00-00-019b0000-0000-7000-8000-0000000000aa.jsonl"
    )
    path.parent.mkdir(parents=True)
    lines = [
        {
            "timestamp": "2026-01-01T10:00:00Z",
            "type": "session_meta",
            "payload": {"id": "019b0000-0000-7000-8000-0000000000aa", "cwd": "/w", "source": "cli"},
        },
        {
            "timestamp": "2026-01-01T10:00:01Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"my token is {secret}"}],
            },
        },
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ingest_archive(
        Settings(archive=archive, db=db, out=tmp_path / "out", prefect=False, progress=False)
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("select day, stage, rule_id, hits, runs from v_redactions").fetchall()
    finally:
        con.close()
    per_rule = [r for r in rows if r[2] != "(all rules)"]
    totals = [r for r in rows if r[2] == "(all rules)"]
    assert per_rule and all(r[1] == "ingest" and r[3] >= 1 for r in per_rule)
    assert len(totals) == 1 and totals[0][3] == sum(r[3] for r in per_rule) and totals[0][4] == 1
