"""Progress bars count what a phase works through, in its unit, and a terminal shows what
the process does from its first moment."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

from rich.console import Console

from memkiln.io.progress import BYTES, Reporter, rate_text
from tests.sample_db import SAMPLE_ARCHIVE


def _terminal() -> tuple[Console, StringIO]:
    out = StringIO()
    return Console(file=out, force_terminal=True, width=160, color_system=None), out


def test_a_rate_reads_per_second_and_below_one_a_second_per_minute() -> None:
    assert rate_text(4.25, "sessions") == "4.25 sessions/s"
    assert rate_text(120.4, "sessions") == "120 sessions/s"
    assert rate_text(151_234.0, "sessions") == "151,234 sessions/s"  # never 1.51e+05
    assert rate_text(0.5, "projects") == "30 projects/min"
    assert rate_text(None, "projects") == "– projects/s"


def test_a_bar_of_sessions_counts_sessions_not_bytes() -> None:
    console, out = _terminal()
    reporter = Reporter(enabled=True, console=console)
    with reporter.task("extract", total=58, unit="sessions") as advance:
        for _ in range(58):
            advance(1)
    shown = out.getvalue()
    assert "58/58 sessions" in shown
    assert re.search(r"[\d.]+ sessions/(s|min)", shown)
    assert "bytes" not in shown and "B/s" not in shown


def test_a_bar_of_bytes_counts_bytes_with_a_transfer_rate() -> None:
    console, out = _terminal()
    with Reporter(enabled=True, console=console).task("ingest", total=2_000_000, unit=BYTES) as a:
        a(2_000_000)
    assert "2.0/2.0 MB" in out.getvalue()


def test_the_waiting_line_is_shown_and_ended_by_the_first_bar() -> None:
    console, out = _terminal()
    reporter = Reporter(enabled=True, console=console)
    try:
        reporter.waiting("starting Prefect")
        assert Reporter._status is not None
        with reporter.task("consolidate", total=2, unit="projects") as advance:
            assert Reporter._status is None  # one live display at a time
            advance(2)
    finally:
        Reporter.done_waiting()
    shown = out.getvalue()
    assert "starting Prefect" in shown
    assert shown.index("starting Prefect") < shown.index("2/2 projects")


def test_without_a_terminal_nothing_is_shown() -> None:
    out = StringIO()
    reporter = Reporter(enabled=True, console=Console(file=out, force_terminal=False))
    reporter.waiting("starting Prefect")
    with reporter.task("extract", total=3, unit="sessions") as advance:
        advance(3)
    assert Reporter._status is None
    assert out.getvalue() == ""


def _read_all(fd: int, proc: subprocess.Popen[bytes]) -> str:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode("utf-8", "replace")


def test_memkiln_run_under_a_terminal_says_what_it_does_first_then_counts_sessions_and_projects(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, archive)
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "memkiln.cli", "run", "--archive", str(archive),
            "--db", str(tmp_path / "m.duckdb"), "--out", str(tmp_path / "memories"),
            "--backfill", "--no-prefect",
        ],
        stdin=child, stdout=child, stderr=child, env=env, cwd=tmp_path,
    )  # fmt: skip
    os.close(child)
    try:
        shown = _read_all(main, proc)
    finally:
        os.close(main)
        code = proc.wait(timeout=300)
    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    first = plain.strip().splitlines()[0]
    assert "opening" in first and "m.duckdb" in first  # before anything is read or imported
    assert re.search(r"extract\b.*\b\d+/\d+ sessions", plain)
    assert re.search(r"consolidate\b.*\b\d+/\d+ projects", plain)
    assert not re.search(r"(extract|consolidate)\b.*bytes", plain)
