"""`memkiln report`: one self-contained HTML file whose charts draw in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import polars as pl
import pytest

from memkiln.io.analytics import Frames
from memkiln.io.html_report import render
from tests.sample_db import SampleDb, shared_sample_db

MEMKILN = str(Path(sys.executable).parent / "memkiln")
CHARTS = ("sessions", "failures", "tool_calls", "costs")
HOSTILE = "</script><img src=x onerror=console.error('injected')><b>x</b>"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get)")
    return found


def open_in_chromium(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, and the console messages it logged. The network
    is cut (every host name fails to resolve), so a fetch would show as a console error."""
    done = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=15000",
            "--dump-dom", page.as_uri(),
        ],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def drawn_charts(dom: str) -> dict[str, int]:
    """Chart id -> number of drawn marks (paths, rects, text) in its rendered SVG."""
    found = {}
    for name in CHARTS:
        m = re.search(rf'<div[^>]*id="chart-{name}"[^>]*>(.*?)</svg>', dom, re.S)
        body = m.group(1) if m else ""
        found[name] = len(re.findall(r"<(?:path|rect|text)\b", body)) if "<svg" in body else 0
    return found


def test_memkiln_report_writes_one_offline_file_whose_charts_draw_without_console_errors(
    sample: SampleDb, tmp_path: Path
) -> None:
    out = tmp_path / "site" / "report.html"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_") or k == "MEMKILN_HOME"
    }
    done = subprocess.run(
        [MEMKILN, "report", "--db", str(sample.db), "--memories", str(sample.memories), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "4 charts" in done.stdout and "8 projects" in done.stdout
    html = out.read_text(encoding="utf-8")
    # self-contained: one inline script (the chart library and the specs), nothing loaded
    page, script = html.split('<script type="module">')
    body = script.rstrip().removesuffix("</script>\n</body>\n</html>")
    assert "<script" not in page and "</script>" not in body
    assert not re.search(r"<(?:img|iframe|link|style)\b[^>]*\b(?:src|href)=", page)
    assert "cdn.jsdelivr" not in html and "unpkg" not in html
    # the project table links to the memory folders, relative to the report
    links = [unquote(h) for h in re.findall(r'<a href="([^"]+)"', html)]
    folders = [p for p in sample.memories.iterdir() if p.is_dir()]
    assert len(links) == len(folders) >= 3  # a link per project with memories
    for link in links:
        assert (out.parent / link / "memory_summary.md").is_file(), link

    dom, console = open_in_chromium(out, tmp_path / "profile")
    assert console == []
    marks = drawn_charts(dom)
    assert all(n > 3 for n in marks.values()), marks


def test_values_from_sessions_cannot_inject_markup_or_script_into_the_report(
    tmp_path: Path,
) -> None:
    day = datetime(2026, 1, 1, tzinfo=UTC)
    projects = pl.DataFrame(
        {"project_key": [HOSTILE], "sessions": [1], "recent_sessions": [1], "folder": [HOSTILE]}
    )
    answers = Frames(
        last_run=pl.DataFrame({"command": ["run"], "status": ["failed"], "error": [HOSTILE]}),
        failures=pl.DataFrame(
            {"stage": ["tool call"], "reason": [HOSTILE], "failures": [2], "example": [HOSTILE]}
        ),
        tool_failures=pl.DataFrame(
            {"project_key": [HOSTILE], "tool": ["bash"], "calls": [3], "failed": [2]}
        ),
        costs=pl.DataFrame(
            {
                "day": [day.date()],
                "phase": ["extract"],
                "model": [HOSTILE],
                "requests": [1],
                "input_tokens": [10],
                "output_tokens": [5],
                "cost_usd": [0.01],
            }
        ),
        projects=projects,
        sessions_daily=pl.DataFrame(
            {"day": [day.date()], "project_key": [HOSTILE], "sessions": [1]}
        ),
        redactions=pl.DataFrame({"day": [day.date()], "rule_id": ["x"], "hits": [0]}),
    )
    html, charts = render(
        answers,
        db=tmp_path / "m.duckdb",
        memories=tmp_path / "mem",
        report_dir=tmp_path,
        newest=day,
    )
    assert charts == 4 and HOSTILE not in html
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom, console = open_in_chromium(page, tmp_path / "profile")
    assert console == []
    markup = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)  # the elements, not the code
    assert "<img" not in markup and "<b>x</b>" not in markup
    assert markup.count("&lt;/script&gt;&lt;img src=x") >= 4  # shown as text in the tables
    assert all(n > 3 for n in drawn_charts(dom).values())
