"""The notebook runs top to bottom against the sample database, read-only; as a script it
prints its tables, and with --html it writes a static page that draws offline."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from memkiln.cli import run_cli
from tests.chromium import ARTIFACTS, layout, open_in_chromium, screenshot, with_layout_probe
from tests.sample_db import REPO, SampleDb, shared_sample_db

NOTEBOOK = REPO / "notebooks" / "overview.py"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    return shared_sample_db(tmp_path_factory)


def markup_has_tables(dom: str) -> bool:
    """The tables of the page's sections, as HTML tables or the note for an empty one."""
    sections = ("What happened last night", "Run history", "The views and what their columns")
    return all(s in dom for s in sections) and dom.count("<em>nothing recorded</em>") <= 3


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
    assert answers.run_history.height >= 1
    # what failed and why: memkiln's own failures apart from the agents' tool calls, whose
    # names are merged across formats (Claude Code's Bash, Pi's bash, Codex's shell...)
    assert "tool call" not in answers.failures["stage"].to_list()
    shell = answers.tool_failures.filter(tool_kind="shell").row(0, named=True)
    assert {"Bash", "bash", "shell", "exec_command"} <= set(shell["tool_names"].split(", "))
    assert defs["failed_calls"].height >= 1
    # what it cost: model requests as the run summary counts them (the heuristic sends none)
    assert defs["total"][0] == 0 and answers.costs["model_requests"].sum() == 0
    assert answers.projects.height == 8 and answers.projects["recent_sessions"].sum() >= 1
    assert defs["schema"]["comment"].null_count() == 0
    assert len([o for o in outputs if o is not None]) >= 7
    # read-only: the file is untouched
    assert hashlib.sha256(sample.db.read_bytes()).hexdigest() == before


def test_the_notebook_runs_as_a_script_prints_its_tables_and_says_in_one_line_when_there_is_no_database(
    sample: SampleDb, tmp_path: Path
) -> None:
    env = {**os.environ, "MEMKILN_DB": str(sample.db)}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    for heading in (
        "## What happened last night",
        "## What failed in memkiln, and why",
        "## What it cost",
        "## Which projects are active",
        "## The views and what their columns mean",
    ):
        assert heading in printed, heading
    assert "ended **succeeded**" in printed
    # the tables, whole: a row of the projects table and of the views' documentation
    assert "github.com/nittastudio" in printed
    assert "v_tool_calls" in printed and "tool_kind" in printed
    assert printed.count("┌") >= 7  # a table border per table with rows
    assert "[chart] Sessions per day, by project" in printed
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


def test_the_notebook_writes_a_static_page_whose_tables_and_charts_draw_offline(
    sample: SampleDb, tmp_path: Path
) -> None:
    page = tmp_path / "site" / "overview.html"
    env = {**os.environ, "MEMKILN_DB": str(sample.db)}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK), "--html", str(page)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"wrote {page}" in done.stderr and "6 charts" in done.stderr
    html = page.read_text(encoding="utf-8")
    # nothing to fetch: one inline script (the chart library and the specs), no external
    # script, style, image or frame
    markup, script = html.split('<script type="module">')
    assert "<script" not in markup and "</script>" not in script.removesuffix(
        "</script>\n</body>\n</html>\n"
    ).rstrip().removesuffix("</script>\n</body>\n</html>")
    assert not re.search(r"<(?:img|iframe|link)\b[^>]*\b(?:src|href)=", markup)
    assert "cdn.jsdelivr" not in html and "marimo-team" not in html
    # opened in Chromium with the network cut
    dom, console = open_in_chromium(with_layout_probe(page), tmp_path / "profile")
    assert console == []
    found = layout(dom)
    # every table with rows (the sample's run sent no model request and had no dry run)
    assert found["tables"] >= 7 and markup_has_tables(dom)
    assert len(found["charts"]) == 6 and all(n > 3 for n in found["charts"].values()), found
    assert found["widerCount"] == 0, found["wider"]
    markup = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    assert "What failed in memkiln, and why</h2>" in markup
    assert "nittastudio" in markup and "tool_<wbr>kind" in markup  # rows of the tables
    screenshot(page, ARTIFACTS / "notebook-1280.png", tmp_path / "profile")


def test_the_notebook_says_what_html_takes_when_it_is_given_no_file_name(
    sample: SampleDb,
) -> None:
    env = {**os.environ, "MEMKILN_DB": str(sample.db)}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK), "--html"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0 and "--html takes one file name" in done.stderr


def test_the_notebook_says_when_the_last_run_was_a_dry_run(
    sample: SampleDb, tmp_path: Path
) -> None:
    db = tmp_path / "copy.duckdb"
    shutil.copy(sample.db, db)
    args = ["run", "--archive", str(sample.archive), "--db", str(db), "--out", str(tmp_path)]
    assert run_cli([*args, "--backfill", "--dry-run", "--no-prefect", "--no-progress"]) == 0
    env = {**os.environ, "MEMKILN_DB": str(db)}
    done = subprocess.run(
        [sys.executable, str(NOTEBOOK)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "the last dry run (run --dry-run," in done.stdout
    assert "it only estimated; nothing was extracted or written" in done.stdout
