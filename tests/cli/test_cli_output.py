"""What the command line prints to a pipe or a file (cron's mail, ``| less``, a log): whole
values, never cut to 80 columns; options named as their settings."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from memkiln.cli import app
from memkiln.cli_options import CLI_OPTIONS, OLD_OPTIONS, parse_size
from memkiln.settings import Settings, load_settings


def memkiln_piped(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Output of ``memkiln ARGS`` with stdout a pipe and no COLUMNS (as under cron)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    base.pop("COLUMNS", None)
    base.pop("TERMINAL_WIDTH", None)
    done = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_config_piped_to_a_file_shows_a_150_character_database_path_whole(
    tmp_path: Path,
) -> None:
    db = "/srv/" + "nightly-memory-store-" * 7 + "x" * 3 + "/memkiln.duckdb"
    assert len(db) >= 150
    shown = memkiln_piped("config", "--db", db, cwd=tmp_path)
    assert db in shown
    assert "…" not in shown


def test_no_commands_help_is_cut_when_it_goes_to_a_pipe(tmp_path: Path) -> None:
    group = typer.main.get_command(app)
    for name in ["", *group.commands]:  # type: ignore[attr-defined]
        shown = memkiln_piped(*([name] if name else []), "--help", cwd=tmp_path)
        assert "…" not in shown, f"memkiln {name} --help is cut"
    run_help = memkiln_piped("run", "--help", cwd=tmp_path)
    for variable in ("MEMKILN_MIN_ROLLOUT_IDLE_HOURS", "MEMKILN_MAX_ROLLOUTS_PER_RUN"):
        assert variable in run_help


def test_every_option_is_named_as_its_setting_and_its_variable() -> None:
    for param, (setting, flag) in CLI_OPTIONS.items():
        first = flag.split("/")[0]
        if setting in ("progress", "prefect", "dry_run"):  # --progress/--no-progress, ...
            assert first == "--" + setting.replace("_", "-"), param
        elif setting == "backfill":
            assert flag == "--backfill/--nightly"
        elif setting == "out" and param == "out":
            assert first == "--out"
        else:
            assert first == "--" + setting.replace("_", "-"), (param, flag)
    group = typer.main.get_command(app)
    run = group.commands["run"]  # type: ignore[attr-defined]
    names = {opt for p in run.params for opt in p.opts}
    # the former names are still accepted
    assert {"--max-age-days", "--min-idle-hours", "--max-rollouts", "--timeout"} <= names
    assert "--batch-mb" in names and OLD_OPTIONS["batch_mb"] == ("batch_bytes", "--batch-mb")


def test_the_batch_size_is_given_in_bytes_or_with_a_unit_and_the_old_mb_option_still_works(
    tmp_path: Path,
) -> None:
    assert parse_size("33554432") == 32 * 1024 * 1024
    assert parse_size("32MiB") == parse_size("32M") == 32 * 1024 * 1024
    assert parse_size("50MB") == 50_000_000
    assert parse_size("1.5GiB") == 3 * 512 * 1024 * 1024
    with pytest.raises(typer.BadParameter, match="not a size"):
        parse_size("32 parsecs")
    shown = json.loads(memkiln_piped("config", "--json", "--batch-bytes", "64MiB", cwd=tmp_path))
    assert shown["batch_bytes"] == {
        "value": 64 * 1024 * 1024,
        "source": "command line --batch-bytes",
    }
    shown = json.loads(memkiln_piped("config", "--json", "--batch-mb", "4", cwd=tmp_path))
    assert shown["batch_bytes"]["value"] == 4 * 1024 * 1024


def test_the_backfill_help_reads_as_one_sentence_per_switch(tmp_path: Path) -> None:
    shown = " ".join(memkiln_piped("run", "--help", cwd=tmp_path).split())
    assert "--backfill takes sessions of any age" in shown.replace("│ ", "")
    assert "Nightly: the age limit applies. Ignore" not in shown


def test_scan_limit_is_gone_and_a_config_file_that_still_sets_it_loads_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for key in list(os.environ):
        if key.startswith("MEMKILN_"):
            monkeypatch.delenv(key)
    assert "scan_limit" not in Settings.model_fields
    config = tmp_path / "memkiln.toml"
    config.write_text("scan_limit = 10\nmax_rollouts_per_run = 7\n")
    monkeypatch.setenv("MEMKILN_SCAN_LIMIT", "10")
    with caplog.at_level(logging.WARNING, logger="memkiln"):
        settings, _ = load_settings({}, config=config)
    assert settings.max_rollouts_per_run == 7
    warned = [r.getMessage() for r in caplog.records]
    assert any("scan_limit" in w and "config file" in w and "delete it" in w for w in warned)
    assert any("scan_limit" in w and "environment" in w for w in warned)
    assert "scan_limit" not in memkiln_piped("config", cwd=tmp_path)


def test_a_duration_reads_in_seconds_minutes_or_hours() -> None:
    from memkiln.transforms.report import took

    assert took(4.24) == "4.2 s"
    assert took(185) == "3 min 05 s"
    assert took(2 * 3600 + 61) == "2 h 01 min"


def test_every_summary_says_how_long_the_command_took(sample_archive: Path, tmp_path: Path) -> None:
    args = ["--archive", str(sample_archive), "--db", str(tmp_path / "m.duckdb"), "--no-prefect"]
    table = memkiln_piped("ingest", *args, cwd=tmp_path)
    assert re.search(r"^took \d+\.\d s$", table, re.MULTILINE), table
    shown = json.loads(
        memkiln_piped("extract", "--db", str(tmp_path / "m.duckdb"), "--no-prefect", "--json",
                      cwd=tmp_path)
    )  # fmt: skip
    assert isinstance(shown["seconds"], float) and shown["seconds"] > 0
