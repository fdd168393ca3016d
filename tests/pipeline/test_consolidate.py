"""Phase 2 end to end: per-project memory folders from real sessions, written safely."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from memkiln.io.store import open_store
from memkiln.pipeline.consolidate import consolidate_store
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.tokens import count_tokens
from tests.builders import codex_lines, uid, write_rollout
from tests.conftest import built_once
from tests.fake_openai import FakeOpenAI, Reply

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


def settings(tmp_path: Path, **kw: object) -> Settings:
    base = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "out": tmp_path / "memories",
        "backfill": True,
        "min_rollout_idle_hours": 0,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def run_all(s: Settings) -> None:
    ingest_archive(s)
    extract_store(s)
    consolidate_store(s)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``; a file renamed or removed while it is read (a run writing
    beside the reader) is left out."""
    found = {}
    for p in sorted(root.rglob("*")):
        try:
            if p.is_file():
                found[str(p.relative_to(root))] = (p.read_bytes(), p.stat().st_mtime_ns)
        except FileNotFoundError:
            continue
    return found


def add_session(
    archive: Path, n: int, *, remote: str | None, cwd: str, request: str, at: datetime
) -> Path:
    lines = codex_lines(
        uid(n), request=request, at=at, cwd=cwd, remote=remote,
        calls=[("pytest -q", "Exit code: 1\nOutput:\nE   AssertionError: totals differ"),
               ("pytest -q", "Exit code: 0\nOutput:\n3 passed")],
        feedback="thanks, that works",
    )  # fmt: skip
    return write_rollout(archive, uid(n), lines, at)


def folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def test_sample_archive_gives_every_project_a_complete_grounded_folder(
    sample_archive: Path, tmp_path: Path
) -> None:
    s = settings(tmp_path, archive=sample_archive)
    run_all(s)
    projects = folders(s.out)
    # the sample's sessions that stopped mid-way, or hold nothing durable, get the no-op answer
    assert len(projects) >= 3
    index = (s.out / "INDEX.md").read_text()
    for folder in projects:
        names = {p.name for p in folder.iterdir()}
        assert {"memory_summary.md", "MEMORY.md", "raw_memories.md", "rollout_summaries"} <= names
        summary = (folder / "memory_summary.md").read_text()
        assert summary.splitlines()[0] == MEMORY_GUIDANCE
        assert count_tokens(summary) <= 2_500
        assert f"({folder.name}/memory_summary.md)" in index
        summaries = list((folder / "rollout_summaries").glob("*.md"))
        assert summaries
        for stem_file in summaries:
            assert re.fullmatch(
                r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-[0-9A-Za-z]{4}(-[a-z0-9_]+)?\.md", stem_file.name
            )
        memory = (folder / "MEMORY.md").read_text()
        bullets = [line for line in memory.splitlines() if line.startswith("- ")]
        assert bullets
        for bullet in bullets:
            sources = re.findall(r"rollout_summaries/[^,)\s]+\.md", bullet)
            assert sources, bullet
            for source in sources:
                assert (folder / source).is_file(), source
        for source in re.findall(r"rollout_summaries/[^,)\s]+\.md", summary):
            assert (folder / source).is_file()


def test_a_second_run_changes_no_file_and_a_new_session_changes_only_its_project(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the cart totals. Always run pytest -q before committing.",
        at=T0,
    )
    add_session(
        archive,
        2,
        remote="git@github.com:acme/blog.git",
        cwd="/src/blog",
        request="Add an RSS feed. Never touch the generated HTML.",
        at=T0,
    )
    s = settings(tmp_path)
    run_all(s)
    before = snapshot(s.out)

    run_all(s)
    assert snapshot(s.out) == before  # same bytes, same mtimes

    add_session(
        archive,
        3,
        remote="https://github.com/acme/shop",
        cwd="/tmp/shop-clone",
        request="Add a discount code field.",
        at=T0 + timedelta(days=1),
    )
    run_all(s)
    after = snapshot(s.out)
    changed = {k for k in after if before.get(k) != after[k]} | (before.keys() - after.keys())
    shop = next(f.name for f in folders(s.out) if f.name.startswith("github.com-acme-shop"))
    assert changed - {"INDEX.md"}
    assert all(path.startswith(shop + "/") for path in changed - {"INDEX.md"})


def test_clones_of_one_repository_share_a_project_and_unrelated_ones_share_nothing(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/home/a/shop",
        request="Fix the SHOP-ONLY checkout bug.",
        at=T0,
    )
    add_session(
        archive,
        2,
        remote="https://github.com/acme/shop",
        cwd="/tmp/elsewhere/shop2",
        request="Speed up the SHOP-ONLY search.",
        at=T0 + timedelta(hours=1),
    )
    add_session(
        archive,
        3,
        remote="git@gitlab.com:other/tool.git",
        cwd="/home/a/tool",
        request="Port the TOOL-ONLY parser.",
        at=T0 + timedelta(hours=2),
    )
    s = settings(tmp_path)
    run_all(s)
    projects = folders(s.out)
    assert [p.name.rsplit("-", 1)[0] for p in projects] == [
        "github.com-acme-shop",
        "gitlab.com-other-tool",
    ]
    shop, tool = projects
    assert len(list((shop / "rollout_summaries").glob("*.md"))) == 2
    shop_text = "".join(p.read_text() for p in shop.rglob("*.md"))
    tool_text = "".join(p.read_text() for p in tool.rglob("*.md"))
    assert "TOOL-ONLY" not in shop_text and "SHOP-ONLY" not in tool_text
    assert "TOOL-ONLY" in tool_text and "SHOP-ONLY" in shop_text


def test_a_session_re_extracted_as_no_op_leaves_the_next_consolidation(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the KEEP-ME totals.",
        at=T0,
    )
    second = add_session(
        archive,
        2,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the DROP-ME rounding.",
        at=T0 + timedelta(hours=1),
    )
    s = settings(tmp_path)
    run_all(s)
    folder = folders(s.out)[0]
    assert len(list((folder / "rollout_summaries").glob("*.md"))) == 2
    # the second session is rewritten into a trivial one: stage one now answers no-op
    lines = codex_lines(uid(2), request="hi", at=T0 + timedelta(hours=1), answer="Hello!")
    second.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run_all(s)
    summaries = list((folder / "rollout_summaries").glob("*.md"))
    assert len(summaries) == 1 and "KEEP-ME" in summaries[0].read_text()
    raw = (folder / "raw_memories.md").read_text()
    assert "KEEP-ME" in raw and "DROP-ME" not in raw
    assert "DROP-ME" not in (folder / "MEMORY.md").read_text()


def route_model(body: dict) -> Reply | None:
    """Stage one: a slug that tries to climb out; phase 2: hostile skill names."""
    name = body.get("response_format", {}).get("json_schema", {}).get("name")
    if name == "stage_one_output":
        return Reply("content", content=json.dumps({
            "raw_memory": "---\ndescription: d\ntask_outcome: success\ncwd: /src/shop\nkeywords: shop\n---\n### Task 1: t\ntask_outcome: success\n\nReusable knowledge:\n- run pytest -q\n",
            "rollout_summary": "# Shop work\n\nRollout context: /src/shop\n",
            "rollout_slug": "../../../etc/pass/wd/..",
        }))  # fmt: skip
    if name == "consolidation":
        return Reply("content", content=json.dumps({
            "memory_md": "# Memory: shop\n\n## Reusable knowledge\n\n- run pytest -q (from rollout_summaries/x.md)\n",
            "memory_summary_md": "# Shop\n\n- run pytest -q before committing\n",
            "skills": [
                {"name": "run-tests", "description": "How to run the tests", "body": "1. pytest -q"},
                {"name": "../../x", "description": "escape", "body": "should land inside"},
                {"name": "/etc/cron.d/evil", "description": "escape", "body": "inside too"},
                {"name": "..", "description": "nothing left", "body": "skipped"},
            ],
        }))  # fmt: skip
    return None


def test_openai_consolidation_writes_the_models_files_and_nothing_outside_out(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the totals.",
        at=T0,
    )
    fake_openai.route(route_model)
    s = settings(
        tmp_path, backend="openai", base_url=fake_openai.base_url, model="fake-model", max_retries=0
    )
    outside_before = {p for p in tmp_path.rglob("*") if not p.is_relative_to(s.out)}
    run_all(s)
    folder = folders(s.out)[0]
    summary = (folder / "memory_summary.md").read_text()
    assert summary.startswith(f"{MEMORY_GUIDANCE}\n\n# Shop")
    assert (folder / "MEMORY.md").read_text().startswith("# Memory: shop")
    skills = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("SKILL.md"))
    assert skills == [
        "skills/etc-cron-d-evil/SKILL.md",
        "skills/run-tests/SKILL.md",
        "skills/x/SKILL.md",
    ]
    assert (
        (folder / "skills/run-tests/SKILL.md")
        .read_text()
        .startswith("---\nname: run-tests\ndescription: How to run the tests\n---\n")
    )
    [summary_file] = list((folder / "rollout_summaries").iterdir())
    assert summary_file.name.endswith("-_________etc_pass_wd.md")  # leading _ kept, as Codex does
    outside_after = {p for p in tmp_path.rglob("*") if not p.is_relative_to(s.out)}
    store_files = {tmp_path / f"m.duckdb{suffix}" for suffix in ("", ".wal", ".snapshot")}
    assert outside_after - outside_before <= store_files
    assert not Path("/etc/cron.d/evil").exists()
    # unchanged inputs: no model call on the next run
    calls = fake_openai.count()
    consolidate_store(s)
    assert fake_openai.count() == calls


def test_a_symlinked_output_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    open_store(tmp_path / "m.duckdb").close()  # consolidate does not create a database
    proc = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", "consolidate", "--no-prefect", "--db", str(tmp_path / "m.duckdb"), "--out", str(link)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "symbolic link" in proc.stderr and "Traceback" not in proc.stderr


def _thirty_projects_then_new_sessions(root: Path) -> None:
    """30 projects consolidated once (their files copied to ``old-memories``), then a new
    session of each ingested and extracted: the next consolidation rewrites every project."""
    archive = root / "archive"
    for n in range(30):
        add_session(
            archive,
            n,
            remote=f"git@github.com:acme/p{n}.git",
            cwd=f"/src/p{n}",
            request=f"Fix bug {n} in the OLD module.",
            at=T0 + timedelta(minutes=n),
        )
    s = settings(root)
    run_all(s)
    shutil.copytree(s.out, root / "old-memories")
    for n in range(30):
        add_session(
            archive,
            100 + n,
            remote=f"git@github.com:acme/p{n}.git",
            cwd=f"/src/p{n}",
            request=f"Refactor the NEW module {n}.",
            at=T0 + timedelta(days=1, minutes=n),
        )
    ingest_archive(s)
    extract_store(s)


@pytest.mark.parametrize("kill_after", [1, 5])
def test_a_run_killed_mid_write_leaves_old_or_new_files_never_partial(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, kill_after: int
) -> None:
    # the same starting state for each kill point, built once for the whole test run
    built = built_once(tmp_path_factory, "thirty-projects", _thirty_projects_then_new_sessions)
    if built is None:
        _thirty_projects_then_new_sessions(tmp_path)
    else:
        shutil.copytree(built, tmp_path, dirs_exist_ok=True, symlinks=True)
    s = settings(tmp_path)
    old = {k: v[0] for k, v in snapshot(tmp_path / "old-memories").items()}
    assert len(old) > 30  # every project's files
    cmd = [sys.executable, "-m", "memkiln.cli", "consolidate", "--no-prefect", "--no-progress",
           "--db", str(s.db), "--out", str(s.out)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        current = {k: v[0] for k, v in snapshot(s.out).items() if ".memkiln-tmp-" not in k}
        if sum(1 for k, v in current.items() if old.get(k) != v) >= kill_after:
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = {k: v[0] for k, v in snapshot(s.out).items() if ".memkiln-tmp-" not in k}

    consolidate_store(s)  # the next run finishes the job
    new = {k: v[0] for k, v in snapshot(s.out).items()}
    assert not any(".memkiln-tmp-" in k for k in new)
    for rel, data in partial.items():
        assert data in (old.get(rel), new.get(rel)), f"{rel} is neither the old nor the new version"


def test_show_prints_the_memory_summary_of_a_project(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the totals.",
        at=T0,
    )
    s = settings(tmp_path)
    run_all(s)
    proc = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", "show", "github.com/acme/shop", "--out", str(s.out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(MEMORY_GUIDANCE + "\n")
    missing = subprocess.run(
        [sys.executable, "-m", "memkiln.cli", "show", "nope", "--out", str(s.out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "INDEX.md" in missing.stderr


def test_consolidated_files_hold_no_secret(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    key = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request=f"Use the token {key} and always run the linter.",
        at=T0,
    )
    s = settings(tmp_path)
    run_all(s)
    text = "".join(p.read_text() for p in s.out.rglob("*.md"))
    assert key not in text and "ghp_Z9y8" not in text
    with duckdb.connect(str(s.db), read_only=True) as con:
        stored = con.execute("select raw_memory || rollout_summary from stage1_outputs").fetchall()
    assert all(key not in row[0] for row in stored)
    shutil.rmtree(s.out)


def test_openai_consolidation_is_incremental(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    archive = tmp_path / "archive"
    add_session(
        archive,
        1,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Fix the totals.",
        at=T0,
    )
    s = settings(
        tmp_path, backend="openai", base_url=fake_openai.base_url, model="fake-model", max_retries=0
    )
    run_all(s)
    first = [
        r
        for r in fake_openai.requests
        if r["body"]["response_format"]["json_schema"]["name"] == "consolidation"
    ]
    assert len(first) == 1
    current = (folders(s.out)[0] / "MEMORY.md").read_text().strip()
    add_session(
        archive,
        2,
        remote="git@github.com:acme/shop.git",
        cwd="/src/shop",
        request="Add the VAT line.",
        at=T0 + timedelta(hours=2),
    )
    run_all(s)
    calls = [
        r
        for r in fake_openai.requests
        if r["body"]["response_format"]["json_schema"]["name"] == "consolidation"
    ]
    assert len(calls) == 2
    user = calls[1]["body"]["messages"][1]["content"]
    added = user.split("## Memories added since the last consolidation", 1)[1]
    assert uid(2) in added and uid(1) not in added  # only the new memory is sent as added
    assert current in user.split("## Current MEMORY.md", 1)[1]  # with the current files
