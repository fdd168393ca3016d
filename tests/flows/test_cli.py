"""The command line as a user meets it: help text, one-line errors, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from memkiln.flows.cli import app


def memkiln(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memkiln.flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def command_names() -> list[str]:
    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", command_names())
def test_every_command_has_help_that_explains_each_option(name: str) -> None:
    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    assert command.help, f"{name} has no help text"
    for param in command.params:
        if param.param_type_name == "option" and param.name != "help":
            assert param.help, f"{name} --{param.name} has no help text"
    result = memkiln(name, "--help")
    assert result.returncode == 0
    assert "Usage" in result.stdout


def test_missing_archive_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    result = memkiln(
        "ingest", "--archive", str(tmp_path / "nope"), "--db", str(tmp_path / "m.duckdb")
    )
    assert result.returncode == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unwritable_database_path_is_one_line_and_exit_code_2(
    sample_archive: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = memkiln("ingest", "--archive", str(sample_archive), "--db", str(blocker / "m.duckdb"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "database" in result.stderr


def test_ingest_runs_as_a_prefect_flow_and_prints_its_summary(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    result = memkiln("ingest", "--archive", str(sample_archive), "--db", str(db), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "rollouts written" in result.stdout
    assert "files seen" in result.stdout
    status = memkiln("status", "--db", str(db))
    assert status.returncode == 0, status.stderr
    assert "rollouts: 8" in status.stdout


def test_run_is_the_whole_job_as_one_prefect_flow(sample_archive: Path, tmp_path: Path) -> None:
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    result = memkiln(
        "run", "--archive", str(sample_archive), "--db", str(db), "--out", str(out),
        "--backfill", "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "memkiln extract" in result.stdout and "files written" in result.stdout
    assert (out / "INDEX.md").is_file()
    assert len([p for p in out.iterdir() if p.is_dir()]) >= 4


def test_a_database_held_by_another_process_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from memkiln.io.store import open_store

    db = tmp_path / "m.duckdb"
    holder = open_store(db)
    try:
        result = memkiln("status", "--db", str(db))
    finally:
        holder.close()
    assert result.returncode == 2
    assert "in use by another process" in result.stderr
    assert "Traceback" not in result.stderr


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Error" not in result.stderr.split(":", 1)[0]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--backend", "foo"], {}, ["backend", "'foo'"]),
        (["--api", "foo"], {}, ["api", "'foo'"]),
        ([], {"MEMKILN_RETRY_BUDGET": "0"}, ["retry_budget", "MEMKILN_RETRY_BUDGET"]),
    ],
)
def test_an_invalid_setting_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], words: list[str]
) -> None:
    result = memkiln("extract", "--db", str(tmp_path / "m.duckdb"), *args, env=env)
    one_line_error(result, *words)


def test_a_broken_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "memkiln.toml"
    config.write_text('backend = "openai\n')
    result = memkiln(
        "extract", "--db", str(tmp_path / "m.duckdb"), env={"MEMKILN_CONFIG": str(config)}
    )
    one_line_error(result, "MEMKILN_CONFIG", "not valid TOML")


def test_a_missing_api_key_is_reported_before_anything_runs(
    sample_archive: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    db = tmp_path / "m.duckdb"
    for args in (["extract"], ["run", "--archive", str(sample_archive)]):
        result = subprocess.run(
            [sys.executable, "-m", "memkiln.flows.cli", *args, "--db", str(db),
             "--backend", "openai", "--no-progress"],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        one_line_error(result, "OPENAI_API_KEY")
        assert not db.exists()  # run did not ingest first


@pytest.mark.parametrize("command", ["extract", "consolidate", "status"])
def test_a_mistyped_database_is_refused_not_created(tmp_path: Path, command: str) -> None:
    db = tmp_path / "mistyped.duckdb"
    args = ["--out", str(tmp_path / "memories")] if command == "consolidate" else []
    result = memkiln(command, "--db", str(db), *args)
    one_line_error(result, "no database", str(db))
    assert not db.exists() and not (tmp_path / "memories" / "INDEX.md").exists()


def test_consolidating_a_project_that_matches_nothing_says_so(
    sample_archive: Path, tmp_path: Path
) -> None:
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    from memkiln.flows.consolidate import consolidate_store
    from memkiln.flows.extract import extract_store
    from memkiln.flows.ingest import ingest_archive
    from memkiln.settings import Settings

    settings = Settings(archive=sample_archive, db=db, out=out, backfill=True)
    ingest_archive(settings)
    extract_store(settings)
    consolidate_store(settings)
    index = (out / "INDEX.md").read_bytes()
    result = memkiln(
        "consolidate", "--db", str(db), "--out", str(out), "--project", "no/such/project",
        "--no-prefect",
    )  # fmt: skip
    one_line_error(result, "no project", "no/such/project")
    assert (out / "INDEX.md").read_bytes() == index
