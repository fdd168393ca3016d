"""The console script's quick ``memkiln redact`` (``memkiln.cli_redact``) says and writes what
the full command line (``memkiln.cli``) does, and leaves every other command line to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memkiln.cli_redact import plain_redact

ENTRY = "import sys; from memkiln.{} import main; sys.argv[0] = 'memkiln'; main()"


def _run(module: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-c", ENTRY.format(module), *args]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=300)


def _both(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    quick, full = _run("cli_redact", *args, stdin=stdin), _run("cli", *args, stdin=stdin)
    assert (quick.returncode, quick.stdout, quick.stderr) == (
        full.returncode,
        full.stdout,
        full.stderr,
    )
    return quick


def test_plain_command_lines_are_read_here_and_the_rest_left_to_the_cli(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("x\n", encoding="utf-8")
    assert plain_redact([str(log), "--stats", "-"]) == ([log, Path("-")], True)
    assert plain_redact([]) == ([], False)
    assert plain_redact(["--help"]) is None
    assert plain_redact([str(log), "--stat"]) is None
    assert plain_redact([str(tmp_path / "nope.log")]) is None
    assert plain_redact([str(tmp_path)]) is None  # a folder: the CLI says so


def test_files_and_stats_as_the_full_command_line(tmp_path: Path) -> None:
    token = "ghp_" + "Zq7R2mXk9LpW4vT8nB3cY6hJ1sD5fG0aQe2U"
    a = tmp_path / "a.jsonl"
    a.write_text(
        json.dumps({"type": "function_call_output", "output": f"GITHUB_TOKEN={token}"})
        + "\n"
        + json.dumps({"type": "message", "text": "asana: 'Q7f3kP9mZ2xW8vR4tY6uN1bC5dE0gH3j'"})
        + "\n",
        encoding="utf-8",
    )
    b = tmp_path / "b.log"
    b.write_text("plain line, no newline at the end", encoding="utf-8")
    done = _both("redact", str(a), "-", str(b), "--stats", stdin=b"password=Hunter2Hunter2x9\n")
    assert done.returncode == 0 and token.encode() not in done.stdout
    assert b"Q7f3kP9m" not in done.stdout and b"secrets redacted" in done.stderr


@pytest.mark.parametrize(
    "args", [("redact", "NOPE"), ("redact", "--nope"), ("redact", "FOLDER"), ("redact", "--help")]
)
def test_what_the_quick_path_does_not_read_goes_to_the_cli(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    named = [str(tmp_path / "nope.log") if a == "NOPE" else str(tmp_path) if a == "FOLDER" else a
             for a in args]  # fmt: skip
    done = _both(*named)
    assert done.returncode == (0 if "--help" in args else 2)
