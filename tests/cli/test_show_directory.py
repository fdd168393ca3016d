"""``memkiln show .``: a path names a directory (the current one for ``.``), matched exactly,
never a part of every project's key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memkiln.transforms.lookup import match_directory, names_a_directory
from tests.cli.test_status_lookup import CWDS, PROJECTS, RULES
from tests.sample_db import SampleDb, shared_sample_db


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


@pytest.mark.parametrize("query", [".", "..", "./web", "../shop", "~/src/shop", "/home/dev"])
def test_a_query_written_as_a_path_names_a_directory(query: str) -> None:
    assert names_a_directory(query)


@pytest.mark.parametrize("query", ["shop", "github.com/acme/shop", "acme/shop", ".git-tools"])
def test_a_name_or_a_remote_is_not_a_directory(query: str) -> None:
    assert not names_a_directory(query)


def test_a_directory_inside_a_projects_working_directory_finds_that_project() -> None:
    found = match_directory("/home/dev/shop/web/src", PROJECTS, CWDS, rules=RULES)
    assert (found.keys, found.tier) == (["github.com/acme/shop"], "cwd")
    found = match_directory("/home/dev/shop", PROJECTS, CWDS, rules=RULES)
    assert found.keys == ["github.com/acme/shop"]


def test_a_directory_of_no_project_matches_nothing_not_every_key_that_holds_its_text() -> None:
    # "/home/dev" is part of the key /home/dev/bigbox and of no working directory
    assert match_directory("/home/dev", PROJECTS, CWDS, rules=RULES).keys == []
    assert match_directory("/tmp/x", PROJECTS, CWDS, rules=RULES).keys == []


def test_show_dot_in_a_folder_without_sessions_says_so_and_names_the_folder(
    sample_db: SampleDb, tmp_path: Path
) -> None:
    here = tmp_path / "not-a-project"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", "show", ".", "--db", str(sample_db.db),
         "--out", str(sample_db.memories)],
        capture_output=True, text=True, cwd=here, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = " ".join(done.stderr.split())
    assert "ambiguous" not in line
    assert f"no project's sessions ran in {here.resolve()}" in line
