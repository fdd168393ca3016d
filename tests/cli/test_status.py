"""``memkiln status``, ``memkiln projects`` and ``memkiln show`` as a user runs them (the
console script), on a store made by ``memkiln run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memkiln import connect as memkiln_connect
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from tests.builders import codex_lines, uid, write_rollout
from tests.commands import memkiln
from tests.imports import LIST_IMPORTS, imported, orchestration_imported

#: (remote, cwd) of the projects of the archive below.
PROJECTS = [
    ("git@github.com:a/b.git", "/path/to/cwd"),
    ("https://github.com/acme/shop", "/home/dev/shop"),
    ("https://github.com/acme/shopfront.git", "/home/dev/front"),
    (None, "/home/dev/bigbox"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(db, out)`` after ``memkiln run`` over two sessions of each project."""
    root = tmp_path_factory.mktemp("status")
    archive, db, out = root / "archive", root / "m.duckdb", root / "memories"
    start = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    n = 0
    for remote, cwd in PROJECTS:
        for _ in range(2):
            at = start + timedelta(hours=n)
            lines = codex_lines(
                uid(n), request=f"Task {n}: please always run the linter first", at=at,
                cwd=cwd, remote=remote, calls=[("npm test", "Exit code: 1\nOutput:\nfailed")],
            )  # fmt: skip
            write_rollout(archive, uid(n), lines, at)
            n += 1
    result = memkiln(
        "run", "--archive", str(archive), "--db", str(db), "--out", str(out), "--backfill",
        "--no-prefect", "--no-progress", env=LIST_IMPORTS,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (root / "run-stderr.txt").write_text(result.stderr, encoding="utf-8")
    return db, out


def test_a_run_without_prefect_imports_neither_prefect_nor_dask(
    store: tuple[Path, Path],
) -> None:
    # ``memkiln run --no-prefect`` (the store above) does not pay for importing Prefect
    db, _ = store
    stderr = (db.parent / "run-stderr.txt").read_text(encoding="utf-8")
    assert "memkiln.pipeline.run" in imported(stderr)  # the list is complete
    assert orchestration_imported(stderr) == []


@pytest.mark.parametrize(
    "name",
    [
        "https://github.com/a/b",
        "https://github.com/a/b.git",
        "git@github.com:a/b.git",
        "git@github.com:a/b",
        "github.com/a/b",
        "/path/to/cwd/",
        "/path/to/cwd",
        "b",
    ],
)
def test_show_finds_a_project_by_any_form_of_its_remote_its_cwd_or_its_name(
    store: tuple[Path, Path], name: str
) -> None:
    db, out = store
    expected = next(out.glob("github.com-a-b-*/memory_summary.md")).read_text(encoding="utf-8")
    result = memkiln("show", name, "--db", str(db), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected


def test_show_of_a_project_without_remote_by_its_cwd_or_name(store: tuple[Path, Path]) -> None:
    db, out = store
    outputs = {
        memkiln("show", name, "--db", str(db), "--out", str(out)).stdout
        for name in ("/home/dev/bigbox/", "bigbox", "BIGBOX")
    }
    assert len(outputs) == 1 and outputs.pop().startswith(MEMORY_GUIDANCE + "\n")


def test_an_ambiguous_name_is_one_line_listing_the_candidates_and_exit_2(
    store: tuple[Path, Path],
) -> None:
    db, out = store
    result = memkiln("show", "sho", "--db", str(db), "--out", str(out))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "ambiguous" in result.stderr
    assert "github.com/acme/shop," in result.stderr and "github.com/acme/shopfront" in result.stderr
    assert result.stdout == ""


def test_an_unknown_name_is_one_line_with_candidates_and_exit_2(store: tuple[Path, Path]) -> None:
    db, out = store
    result = memkiln("show", "github.com/acme/shoq", "--db", str(db), "--out", str(out))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no project matches" in result.stderr and "github.com/acme/shop" in result.stderr


def test_status_prints_tables_of_jobs_runs_projects_and_failures(store: tuple[Path, Path]) -> None:
    db, _ = store
    result = memkiln("status", "--db", str(db))
    assert result.returncode == 0, result.stderr
    titles = ("jobs", "last 5 runs", "projects (4 of 4)", "top failure reasons")
    for title in (*titles, "selection reasons"):
        assert title in result.stdout
    assert "rollouts: 8" in result.stdout
    assert "github.com/a/b" in result.stdout
    assert "shape:" not in result.stdout  # not a Polars repr


def test_status_json_is_one_object_with_every_section(store: tuple[Path, Path]) -> None:
    db, _ = store
    result = memkiln("status", "--json", "--db", str(db))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tables"]["rollouts"] == 8
    assert sum(report["jobs"]["extract"].values()) == 8
    assert report["jobs"]["consolidate"] == {"succeeded": 4}
    assert report["projects"]["count"] == 4
    assert report["runs"][0]["command"] == "run" and report["runs"][0]["status"] == "succeeded"
    assert report["failures"] == []
    # every session is accounted for by the latest selection, with its reason
    assert sum(row["sessions"] for row in report["selection"]) == 8
    assert all(row["decision"] and row["reason"] for row in report["selection"])


def test_projects_lists_every_project_as_a_table_or_json(store: tuple[Path, Path]) -> None:
    db, _ = store
    table = memkiln("projects", "--db", str(db))
    assert table.returncode == 0, table.stderr
    assert "4 projects" in table.stdout and "/home/dev/bigbox" in table.stdout
    rows = json.loads(memkiln("projects", "--json", "--db", str(db)).stdout)
    assert sorted(r["project_key"] for r in rows) == [
        "/home/dev/bigbox",
        "github.com/a/b",
        "github.com/acme/shop",
        "github.com/acme/shopfront",
    ]
    assert all(r["sessions"] == 2 and r["memories"] == 2 for r in rows)


def test_the_project_of_sessions_without_remote_or_cwd_is_listed_like_any_other(
    tmp_path: Path,
) -> None:
    # their memories go to the folder unknown-project-*, listed in INDEX.md: projects, status,
    # the views and show name it the same way
    archive, db, out = tmp_path / "archive", tmp_path / "m.duckdb", tmp_path / "memories"
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    for n, remote in enumerate(("git@github.com:a/b.git", None)):
        lines = codex_lines(uid(n), request="Always use ruff, never black.", at=at, remote=remote)
        if remote is None:
            del lines[0]["payload"]["cwd"]
        write_rollout(archive, uid(n), lines, at)
    result = memkiln(
        "run", "--archive", str(archive), "--db", str(db), "--out", str(out), "--backfill",
        "--no-prefect", "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (folder,) = out.glob("unknown-project-*")
    rows = json.loads(memkiln("projects", "--json", "--db", str(db)).stdout)
    listed = {r["project_key"]: (r["folder"], r["memories"]) for r in rows}
    assert listed == {
        "github.com/a/b": (next(out.glob("github.com-a-b-*")).name, 1),
        "unknown-project": (folder.name, 1),
    }
    report = json.loads(memkiln("status", "--json", "--db", str(db)).stdout)
    assert report["projects"]["count"] == 2
    shown = memkiln("show", "unknown-project", "--db", str(db), "--out", str(out))
    assert shown.stdout == (folder / "memory_summary.md").read_text(encoding="utf-8")
    con = memkiln_connect(db)
    try:
        for view in ("v_projects", "v_coverage", "v_sessions_daily", "v_costs"):
            keys = {
                k for (k,) in con.execute(f"select distinct project_key from {view}").fetchall()
            }
            assert "unknown-project" in keys and "(no project)" not in keys, (view, keys)
    finally:
        con.close()


#: ``memkiln status`` and ``projects`` in a fresh process, then the heavy modules it loaded.
LOADED = """
import json, sys
from memkiln.cli import run_cli
code = run_cli(sys.argv[1:])
heavy = ("polars", "jinja2", "prefect", "pyarrow")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["projects", "--json"]])
def test_status_and_projects_load_neither_polars_nor_the_prompt_templates(
    store: tuple[Path, Path], command: list[str]
) -> None:
    # importing Polars and jinja2 was most of the 1.2-1.5 s of CPU 'memkiln status' took,
    # which made it take 3-4 s on a busy machine against its target of under 2 s
    db, _ = store
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *command, "--db", str(db)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "github.com/a/b" in done.stdout
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
