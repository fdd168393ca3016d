"""The notebook runs top to bottom against the sample database, read-only."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.sample_db import REPO, SampleDb, shared_sample_db

NOTEBOOK = REPO / "notebooks" / "overview.py"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memkiln_overview_notebook", NOTEBOOK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_notebook_answers_each_question_from_the_sample_database(
    sample: SampleDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = hashlib.sha256(sample.db.read_bytes()).hexdigest()
    monkeypatch.setenv("MEMKILN_DB", str(sample.db))
    outputs, defs = _load().app.run()
    answers = defs["answers"]
    assert answers.last_run["command"].to_list()[0] == "run"  # what happened last night
    assert answers.last_run["status"].to_list() == ["succeeded"] * 4
    assert answers.failures.filter(stage="tool call").height >= 1  # what failed and why
    assert defs["failed_calls"].height >= 1
    assert answers.costs.height >= 1  # what it cost
    assert answers.projects.height == 8 and answers.projects["recent_sessions"].sum() >= 1
    assert defs["schema"]["comment"].null_count() == 0
    assert len([o for o in outputs if o is not None]) >= 7
    # read-only: the file is untouched
    assert hashlib.sha256(sample.db.read_bytes()).hexdigest() == before


def test_the_notebook_runs_as_a_script_and_says_in_one_line_when_there_is_no_database(
    sample: SampleDb, tmp_path: Path
) -> None:
    env = {**os.environ, "MEMKILN_DB": str(sample.db)}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    env["MEMKILN_DB"] = str(tmp_path / "missing.duckdb")
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0 and "no database at" in done.stderr


def test_the_notebook_reads_the_database_named_in_the_config_file(
    sample: SampleDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as every memkiln command does: no MEMKILN_DB, the config file's `db`
    config = tmp_path / "memkiln.toml"
    config.write_text(f"db = {str(sample.db)!r}\n", encoding="utf-8")
    monkeypatch.delenv("MEMKILN_DB", raising=False)
    monkeypatch.setenv("MEMKILN_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)  # no data/memkiln.duckdb here
    _, defs = _load().app.run()
    assert defs["db"] == sample.db
    assert defs["answers"].projects.height == 8
