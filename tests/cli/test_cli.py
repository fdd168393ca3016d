"""The command line as a user meets it: help text, one-line errors, exit codes, settings
from every source. Commands run through the installed ``memkiln`` console script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pytest
import typer.main

from memkiln.cli import app
from memkiln.cli_options import CLI_OPTIONS, OLD_OPTIONS
from memkiln.settings import Options
from tests.commands import MEMKILN, memkiln, one_line_error
from tests.imports import LIST_IMPORTS, orchestration_imported
from tests.prefect_server import flow_run_state


#: The console script installed beside this Python (``pip install -e .``).
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
    result = memkiln(name, "--help", env=LIST_IMPORTS)
    assert result.returncode == 0
    assert "Usage" in result.stdout
    # help is read without starting Prefect or Dask (their imports are about 1 s of CPU)
    assert orchestration_imported(result.stderr) == []


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


def flow_runs(db: Path) -> dict[str, str]:
    """Command -> the Prefect flow run it ran in, from memkiln's own records."""
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("select command, flow_run_id from runs").fetchall())


@pytest.mark.prefect_server
def test_ingest_runs_as_a_prefect_flow_and_prints_its_summary(
    sample_archive: Path, tmp_path: Path, prefect_api: str | None
) -> None:
    db = tmp_path / "m.duckdb"
    result = memkiln("ingest", "--archive", str(sample_archive), "--db", str(db), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "rollouts written" in result.stdout
    assert "files seen" in result.stdout
    if prefect_api is not None:  # the run the server holds is the one memkiln recorded
        assert flow_run_state(prefect_api, flow_runs(db)["ingest"]) == "COMPLETED"
    status = memkiln("status", "--db", str(db))
    assert status.returncode == 0, status.stderr
    assert "rollouts: 8" in status.stdout


@pytest.mark.prefect_server
def test_run_is_the_whole_job_as_one_prefect_flow(
    sample_archive: Path, tmp_path: Path, prefect_api: str | None
) -> None:
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    result = memkiln(
        "run", "--archive", str(sample_archive), "--db", str(db), "--out", str(out),
        "--backfill", "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "memkiln extract" in result.stdout and "files written" in result.stdout
    assert (out / "INDEX.md").is_file()
    # the sample's sessions that stopped mid-way, or hold nothing durable, get no memory
    assert len([p for p in out.iterdir() if p.is_dir()]) >= 3
    # one flow run: the phases ran inside the run's flow, not as flows of their own
    runs = flow_runs(db)
    assert set(runs) == {"run", "ingest", "extract", "consolidate"}
    assert len(set(runs.values())) == 1 and None not in runs.values()
    if prefect_api is not None:
        assert flow_run_state(prefect_api, runs["run"]) == "COMPLETED"


def test_a_database_held_by_another_process_is_one_line_and_exit_3(tmp_path: Path) -> None:
    from memkiln.io.store import open_store

    db = tmp_path / "m.duckdb"
    holder = open_store(db)
    try:
        result = memkiln("status", "--db", str(db))
    finally:
        holder.close()
    assert result.returncode == 3
    assert len(result.stderr.strip().splitlines()) == 1
    assert "in use by another process" in result.stderr
    assert "Traceback" not in result.stderr


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
            [MEMKILN, *args, "--db", str(db), "--backend", "openai", "--no-progress"],
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
    from memkiln.pipeline.consolidate import consolidate_store
    from memkiln.pipeline.extract import extract_store
    from memkiln.pipeline.ingest import ingest_archive
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


#: Options that are not settings: what one invocation acts on or prints.
NOT_SETTINGS = {"help", "project", "show_system", "as_json", "cron", "name", "config", "version"}
NOT_SETTINGS |= {"report_file"}  # memkiln report --out: the HTML file it writes
NOT_SETTINGS.add("stats")  # memkiln redact --stats: what one invocation prints
NOT_SETTINGS |= {"to", "remove"}  # memkiln publish --to / --remove: what one invocation does


def test_every_option_of_every_command_is_a_setting_without_a_default_of_its_own() -> None:
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if param.param_type_name != "option" or param.name in NOT_SETTINGS:
                continue
            known = param.name in CLI_OPTIONS or param.name in OLD_OPTIONS
            assert known, f"{name} --{param.name} maps onto no setting"
            assert param.default is None, f"{name} --{param.name} has a default of its own"


# One value per source for every setting that has an option, as (config, env, command line).
FOUR_SOURCES: dict[str, tuple[Any, Any, Any]] = {
    "db": ("cfg.duckdb", "/e/env.duckdb", "/c/cli.duckdb"),
    "archive": ("cfg-archive", "/e/archive", "/c/archive"),
    "out": ("cfg-out", "/e/out", "/c/out"),
    "batch_bytes": (1000, 2000, 3000),
    "progress": (False, True, False),
    "prefect": (False, True, False),
    "task_runner": ("dask", "thread", "dask"),
    "dask_address": ("tcp://cfg:8786", "tcp://env:8786", "tcp://cli:8786"),
    "backend": ("openai", "heuristic", "openai"),
    "model": ("cfg-model", "env-model", "cli-model"),
    "base_url": ("http://cfg/v1", "http://env/v1", "http://cli/v1"),
    "api": ("responses", "chat", "responses"),
    "concurrency": (3, 5, 7),
    "context_window": (100000, 200000, 300000),
    "backfill": (True, False, True),
    "max_age_days": (2.5, 3.5, 4.5),
    "min_idle_hours": (0.5, 1.5, 2.5),
    "max_rollouts": (11, 22, 33),
    "sources": (["exec"], ["cli", "mcp"], ["vscode"]),
    "timeout": (11.0, 22.0, 33.0),
    "max_retries": (1, 2, 3),
    "since": ("2025-01-01", "2025-02-01", "2025-03-01"),
    "until": ("2025-12-01", "2025-12-02", "2025-12-03"),
    "dry_run": (True, False, True),
    "budget_usd": (1.5, 2.5, 3.5),
    "publish": (["codex"], ["claude", "omp"], ["omp"]),
    "codex_alongside": (True, False, True),
    "wait": (True, False, True),
    "poll_interval": (5.0, 10.0, 15.0),
}


def _setting_value(param: str, value: Any) -> Any:
    return value


def _cli_args(param: str, value: Any) -> list[str]:
    flag = CLI_OPTIONS[param][1]
    if "/" in flag:
        on, off = flag.split("/")
        return [on if value else off]
    return [flag, ",".join(value) if isinstance(value, list) else str(value)]


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return ",".join(value) if isinstance(value, list) else str(value)


def test_every_setting_with_an_option_takes_the_value_of_its_highest_source(
    tmp_path: Path,
) -> None:
    assert set(FOUR_SOURCES) == set(CLI_OPTIONS)
    folder = tmp_path / "etc"
    folder.mkdir()
    config = folder / "memkiln.toml"
    lines = []
    for param, (cfg, _, _) in FOUR_SOURCES.items():
        setting = CLI_OPTIONS[param][0]
        lines.append(f"{setting} = {json.dumps(_setting_value(param, cfg))}")
    config.write_text("\n".join(lines) + "\n")
    env = {
        f"MEMKILN_{CLI_OPTIONS[p][0].upper()}": _env_text(_setting_value(p, e))
        for p, (_, e, _) in FOUR_SOURCES.items()
    }
    cli = [arg for p, (_, _, c) in FOUR_SOURCES.items() for arg in _cli_args(p, c)]
    runs = {
        "default": memkiln("config", "--json", cwd=tmp_path),
        "config": memkiln("config", "--json", env={"MEMKILN_CONFIG": str(config)}, cwd=tmp_path),
        "env": memkiln(
            "config", "--json", env={"MEMKILN_CONFIG": str(config), **env}, cwd=tmp_path
        ),
        "cli": memkiln(
            "config", "--json", *cli, env={"MEMKILN_CONFIG": str(config), **env}, cwd=tmp_path
        ),
    }
    for layer, result in runs.items():
        assert result.returncode == 0, result.stderr
        shown = json.loads(result.stdout)
        for param, values in FOUR_SOURCES.items():
            setting = CLI_OPTIONS[param][0]
            got = shown[setting]
            if layer == "default":
                want = Options.model_fields[setting].get_default(call_default_factory=True)
                want = str(want) if isinstance(want, Path) else want
                assert (got["value"], got["source"]) == (want, "default"), setting
                continue
            value = _setting_value(param, values[("config", "env", "cli").index(layer)])
            if layer == "config" and setting in ("db", "archive", "out"):
                value = str(folder / value)  # relative to the config file's folder
            source = {
                "config": f"config file {config}",
                "env": f"environment MEMKILN_{setting.upper()}",
                "cli": f"command line {CLI_OPTIONS[param][1]}",
            }[layer]
            assert (got["value"], got["source"]) == (value, source), (layer, setting)


def test_a_config_file_sets_the_database_archive_output_and_backfill_of_a_run(
    sample_archive: Path, tmp_path: Path
) -> None:
    config = tmp_path / "etc" / "memkiln.toml"
    config.parent.mkdir()
    config.write_text(
        f'db = "../state/m.duckdb"\nout = "../memories"\narchive = "{sample_archive}"\n'
        "backfill = true\nprefect = false\nprogress = false\n"
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    result = memkiln("run", env={"MEMKILN_CONFIG": str(config)}, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "state" / "m.duckdb").is_file()
    assert (tmp_path / "memories" / "INDEX.md").is_file()  # backfill: the old samples count
    assert not (elsewhere / "data").exists()


def test_the_backend_named_in_the_environment_is_the_one_used(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    from memkiln.io.store import open_store

    open_store(db).close()
    env = {"MEMKILN_BACKEND": "openai", "MEMKILN_DB": str(db), "OPENAI_API_KEY": ""}
    result = memkiln("extract", env=env)
    one_line_error(result, "OPENAI_API_KEY")


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = memkiln("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"memkiln {version('memkiln')}"


def test_a_value_of_the_wrong_type_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    result = memkiln("extract", "--concurrency", "many", "--db", str(tmp_path / "m.duckdb"))
    one_line_error(result, "--concurrency", "integer")


def test_a_run_where_sessions_fail_exits_1_and_says_which(
    sample_archive: Path, tmp_path: Path, fake_openai: Any
) -> None:
    from tests.fake_openai import Reply

    fake_openai.default = Reply("status", status=400)
    result = memkiln(
        "run", "--archive", str(sample_archive), "--db", str(tmp_path / "m.duckdb"),
        "--out", str(tmp_path / "out"), "--backfill", "--no-prefect", "--no-progress",
        "--backend", "openai", "--base-url", fake_openai.base_url, "--max-retries", "0",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "session(s) failed" in result.stdout and "v_extraction_outcomes" in result.stdout


def test_a_prefect_server_that_does_not_start_is_one_line_and_nothing_done(
    tmp_path: Path, sample_archive: Path
) -> None:
    # on a busy machine Prefect's temporary server can miss its start-up limit: the user got
    # Prefect's 69-line traceback and exit 1; a one-second limit makes it happen here
    db = tmp_path / "m.duckdb"
    result = memkiln(
        "ingest", "--archive", str(sample_archive), "--db", str(db), "--no-progress",
        env={"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "1"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Prefect's temporary API server did not start" in lines[0]
    assert "--no-prefect" in lines[0]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from runs").fetchone() == (0,)


def test_the_dask_runner_without_prefect_is_one_line_and_exit_2(
    sample_archive: Path, tmp_path: Path
) -> None:
    # the work runs as Prefect tasks on Dask: without Prefect the option was silently ignored
    db = tmp_path / "m.duckdb"
    result = memkiln(
        "ingest", "--archive", str(sample_archive), "--db", str(db), "--no-prefect",
        "--task-runner", "dask",
    )  # fmt: skip
    one_line_error(result, "task_runner dask", "--no-prefect")
    assert not db.exists()
