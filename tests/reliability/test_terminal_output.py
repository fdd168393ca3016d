"""What memkiln prints to a terminal. Values from sessions (a project key is a working
directory when there is no git remote) and paths a user gives are shown as they are: never
read as Rich markup (``[draft]`` vanished, ``[/x]`` crashed the printer with a traceback), and
without control characters or terminal escapes (``ESC [2J`` cleared the user's screen)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.builders import codex_lines, uid, write_rollout

MARKUP = "[draft]/[/x] [link=https://evil.example]click[/link]"
HOSTILE_CWD = f"/srv/{MARKUP}/app\x1b[2J\x1b]0;owned\x07\u202eZ"
UNSAFE = ("\x1b", "\x07", "\u202e")


def memkiln(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    script = str(Path(sys.executable).with_name("memkiln"))
    env = os.environ | {"MEMKILN_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("terminal")
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    lines = codex_lines(uid(1), request="Fix the cart. Always run pytest -q first.", at=at,
                        cwd=HOSTILE_CWD, remote=None)  # fmt: skip
    write_rollout(root / "archive", uid(1), lines, at)
    db = root / "m.duckdb"
    done = memkiln("ingest", "--archive", str(root / "archive"), "--db", str(db),
                   "--no-prefect", "--no-progress", home=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return db


def shown_as_it_is(text: str) -> None:
    assert not any(c in text for c in UNSAFE), repr(text)
    assert MARKUP in text, text


@pytest.mark.parametrize("command", ["projects", "status"])
def test_a_project_key_is_listed_as_it_is_without_terminal_escapes(
    store: Path, tmp_path: Path, command: str
) -> None:
    done = memkiln(command, "--db", str(store), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    shown_as_it_is(done.stdout)


def test_the_candidates_of_an_unknown_project_are_one_line_as_they_are(
    store: Path, tmp_path: Path
) -> None:
    done = memkiln("show", "srv draft app", "--db", str(store), home=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "candidates" in line
    shown_as_it_is(line)


def test_an_error_naming_a_path_with_brackets_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    archive = tmp_path / "[/old] [draft]"
    done = memkiln("ingest", "--archive", str(archive), "--db", str(tmp_path / "m.duckdb"),
                   "--no-prefect", home=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(archive) in line


def test_a_note_about_a_failed_project_is_shown_as_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memkiln.cli_output import print_sections

    print_sections([], notes=[f"project failed: {HOSTILE_CWD}: unsafe_path: a symbolic link"])
    out = capsys.readouterr().out
    assert out.startswith("attention: project failed: ")
    shown_as_it_is(out)
