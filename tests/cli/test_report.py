"""`memkiln report`: one self-contained HTML file whose charts draw in headless Chromium with
the network cut, a status banner first, and nothing wider than a 1280-pixel screen."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import polars as pl
import pytest

from memkiln.io.analytics import Frames
from memkiln.io.html_report import render
from tests.chromium import (
    ARTIFACTS,
    WIDTH,
    layout,
    open_in_chromium,
    screenshot,
    with_layout_probe,
)
from tests.commands import MEMKILN
from tests.sample_db import SampleDb, shared_sample_db

CHARTS = ("runs", "sessions", "failures", "tool_kinds", "tool_projects", "costs")
HOSTILE = "</script><img src=x onerror=console.error('injected')><b>x</b>"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def drawn_charts(dom: str) -> dict[str, int]:
    """Chart id -> number of drawn marks (paths, rects, text) in its rendered SVG."""
    found = {}
    for name in CHARTS:
        m = re.search(rf'<div[^>]*id="chart-{name}"[^>]*>(.*?)</svg>', dom, re.S)
        body = m.group(1) if m else ""
        found[name] = len(re.findall(r"<(?:path|rect|text)\b", body)) if "<svg" in body else 0
    return found


def memkiln_report(sample: SampleDb, out: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_") or k == "MEMKILN_HOME"
    }
    return subprocess.run(
        [MEMKILN, "report", "--db", str(sample.db), "--memories", str(sample.memories), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


def test_memkiln_report_writes_one_offline_file_whose_charts_draw_without_console_errors(
    sample: SampleDb, tmp_path: Path
) -> None:
    out = tmp_path / "site" / "report.html"
    done = memkiln_report(sample, out)
    assert done.returncode == 0, done.stderr
    assert f"{len(CHARTS)} charts" in done.stdout and "8 projects" in done.stdout
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


def test_the_report_at_1280_pixels_opens_with_the_status_banner_and_nothing_is_wider_than_the_page(
    sample: SampleDb, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    assert memkiln_report(sample, out).returncode == 0
    dom, console = open_in_chromium(with_layout_probe(out), tmp_path / "profile")
    assert console == []
    found = layout(dom)
    assert found["innerWidth"] == WIDTH
    # the banner first: the last run, how it ended, its sessions, cost and time
    banner = found["banner"]
    assert banner["cls"] == "banner ok"
    assert banner["text"].startswith("Last run succeeded")
    for fact in ("memkiln run", "took", "6 done: 3 with a memory", "model requests", "$0.0000"):
        assert fact in banner["text"], fact
    assert dom.index('id="banner"') < dom.index('class="charts"') < dom.index("<table")
    assert banner["bottom"] <= 600  # first, at the top of the screenshot
    # no element reaches past the right edge; cells wrap between words only
    assert found["widerCount"] == 0, found["wider"]
    assert found["scrollWidth"] == found["clientWidth"] == WIDTH
    assert found["wraps"] == ["normal/normal"]
    assert all(n > 3 for n in found["charts"].values()), found["charts"]
    # the screenshot CI keeps (.ci/artifacts is git-ignored)
    png = screenshot(out, ARTIFACTS / "report-1280.png", tmp_path / "profile")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def many_projects_answers(n: int = 60) -> Frames:
    """A store of ``n`` projects with long keys, long errors and unbroken tokens: what made
    the old report's tables run off the page and its legends list every project."""
    day = datetime(2026, 3, 1, tzinfo=UTC)
    keys = [f"github.com/organisation-{i}/a-rather-long-repository-name_{i}" for i in range(n)]
    error = "ENOENT: no such file or directory, open '/home/someone/work/" + "x" * 90 + "'"
    token = "sha256:" + "f" * 80
    projects = pl.DataFrame(
        {
            "project_key": keys,
            "sessions": list(range(n)),
            "recent_sessions": [i % 3 for i in range(n)],
            "last_active_at": [day - timedelta(days=i) for i in range(n)],
            "extracted": [1] * n,
            "no_output": [0] * n,
            "failed": [0] * n,
            "eligible": [1] * n,
            "tool_calls": [10 + i for i in range(n)],
            "failed_tool_calls": [i % 4 for i in range(n)],
            "memories": [1] * n,
            "folder": [k.replace("/", "-") for k in keys],
        }
    )
    runs = pl.DataFrame(
        {
            "started_at": [day + timedelta(days=i) for i in range(20)],
            "command": ["run"] * 20,
            "status": ["succeeded", "failed"] * 10,
            "dry_run": [False] * 20,
            "seconds": [30.0 + i for i in range(20)],
            "sessions_done": [5] * 20,
            "sessions_failed": [1] * 20,
            "projects_written": [2] * 20,
            "projects_failed": [0] * 20,
            "model_requests": [7] * 20,
            "cost_usd": [0.12] * 20,
        }
    )
    latest = runs.tail(1).select(
        run_id=pl.lit("r" * 32),
        command="command",
        status="status",
        dry_run="dry_run",
        started_at="started_at",
        ended_at="started_at",
        seconds="seconds",
        sessions_done="sessions_done",
        sessions_succeeded=pl.lit(3),
        sessions_no_output=pl.lit(1),
        sessions_failed="sessions_failed",
        projects_written="projects_written",
        projects_failed="projects_failed",
        model_requests="model_requests",
        cost_usd="cost_usd",
        phases=pl.lit("ingest:succeeded, extract:failed, consolidate:succeeded"),
        error=pl.lit(error + " " + token),
    )
    return Frames(
        banner=latest,
        last_run=pl.DataFrame({"command": ["run"], "status": ["failed"], "error": [error]}),
        run_history=runs,
        failures=pl.DataFrame(
            {
                "stage": ["extract"] * 30,
                "reason": [f"reason_number_{i}_{token}" for i in range(30)],
                "failures": list(range(30, 0, -1)),
                "example": [error] * 30,
            }
        ),
        tool_failures=pl.DataFrame(
            {
                "tool_kind": [f"tool_{i}" for i in range(40)],
                "calls": [100 - i for i in range(40)],
                "failed": [i % 5 for i in range(40)],
                "failed_share": [0.05] * 40,
                "projects": [3] * 40,
                "tool_names": [", ".join(f"Tool_{i}_{j}" for j in range(12)) for i in range(40)],
                "example_error": [token] * 40,
            }
        ),
        costs=pl.DataFrame(
            {
                "day": [(day + timedelta(days=i)).date() for i in range(30)],
                "phase": ["extract"] * 30,
                "backend": ["openai"] * 30,
                "model": [f"model-{i}" for i in range(30)],
                "model_requests": [10] * 30,
                "input_tokens": [1000 + i for i in range(30)],
                "output_tokens": [100] * 30,
                "cost_usd": [0.01] * 30,
            }
        ),
        estimates=pl.DataFrame(
            {
                "estimated_at": [day],
                "command": ["run"],
                "sessions_to_do": [51],
                "projects_with_sessions_to_do": [47],
                "estimated_model_requests": [91],
                "estimated_tokens": [1_234_567],
                "estimated_cost_usd": [1.5],
                "ran_at": [day + timedelta(hours=1)],
                "run_status": ["succeeded"],
                "sessions_done": [51],
                "projects_written": [44],
                "model_requests": [91],
                "tokens": [1_200_000],
                "spent_usd": [1.45],
            }
        ),
        projects=projects,
        sessions_daily=pl.DataFrame(
            {
                "day": [(day + timedelta(days=i % 20)).date() for i in range(n)],
                "project_key": keys,
                "sessions": [1 + i % 4 for i in range(n)],
            }
        ),
        redactions=pl.DataFrame({"day": [day.date()], "rule_id": ["x"], "hits": [0]}),
    )


def test_a_store_of_sixty_long_named_projects_still_fits_1280_pixels_and_shows_the_failed_run(
    tmp_path: Path,
) -> None:
    answers = many_projects_answers()
    html, _ = render(
        answers, db=tmp_path / "m.duckdb", memories=tmp_path / "mem", report_dir=tmp_path,
        newest=datetime(2026, 3, 1, tzinfo=UTC),
    )  # fmt: skip
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom, console = open_in_chromium(with_layout_probe(page), tmp_path / "profile")
    assert console == []
    found = layout(dom)
    assert found["widerCount"] == 0, found["wider"]
    assert found["scrollWidth"] == WIDTH
    assert found["banner"]["cls"] == "banner failed"
    assert found["banner"]["text"].startswith("Last run failed")
    assert found["banner"]["bottom"] <= 600  # first, in the screenshot's top
    assert all(n > 3 for n in found["charts"].values()), found["charts"]
    # the estimate beside what the run then did
    assert "projects with sessions to do" in dom and "projects written" in dom
    screenshot(page, ARTIFACTS / "report-many-projects-1280.png", tmp_path / "profile")


def test_values_from_sessions_cannot_inject_markup_or_script_into_the_report(
    tmp_path: Path,
) -> None:
    answers = many_projects_answers(3)
    hostile = Frames(
        banner=answers.banner.with_columns(error=pl.lit(HOSTILE), phases=pl.lit(HOSTILE)),
        last_run=pl.DataFrame({"command": ["run"], "status": ["failed"], "error": [HOSTILE]}),
        run_history=answers.run_history.with_columns(command=pl.lit(HOSTILE)),
        failures=pl.DataFrame(
            {"stage": ["extract"], "reason": [HOSTILE], "failures": [2], "example": [HOSTILE]}
        ),
        tool_failures=answers.tool_failures.with_columns(tool_kind=pl.lit(HOSTILE)),
        costs=answers.costs.with_columns(model=pl.lit(HOSTILE)),
        estimates=answers.estimates.with_columns(command=pl.lit(HOSTILE)),
        projects=answers.projects.with_columns(project_key=pl.lit(HOSTILE), folder=pl.lit(HOSTILE)),
        sessions_daily=answers.sessions_daily.with_columns(project_key=pl.lit(HOSTILE)),
        redactions=answers.redactions,
    )
    html, charts = render(
        hostile,
        db=tmp_path / "m.duckdb",
        memories=tmp_path / "mem",
        report_dir=tmp_path,
        newest=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert charts == len(CHARTS) and HOSTILE not in html
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom, console = open_in_chromium(page, tmp_path / "profile")
    assert console == []
    markup = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)  # the elements, not the code
    assert "<img" not in markup and "<b>x</b>" not in markup
    # shown as text in the banner and the tables (a <wbr> may follow a separator)
    shown = re.sub(r"<wbr>", "", markup)
    assert shown.count("&lt;/script&gt;&lt;img src=x onerror") >= 6
    assert all(n > 3 for n in drawn_charts(dom).values())


def test_a_folder_given_as_the_report_file_is_a_one_line_error(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    done = subprocess.run(
        [MEMKILN, "report", "--db", str(tmp_path / "m.duckdb"), "--out", str(folder)],
        capture_output=True, text=True, env=os.environ | {"MEMKILN_HOME": str(tmp_path / "h")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --out {folder} is a folder: give the HTML file to write"
    ]
