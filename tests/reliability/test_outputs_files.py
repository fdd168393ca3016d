"""Memory files under hostile input and failing disks: safe names, clean text, bounded size,
atomic writes, and one clear line per failure while the other projects are still written."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from memkiln.io.memory_files import OutputRoot
from memkiln.io.rules import load_rules
from memkiln.pipeline.consolidate import consolidate_store
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.consolidate import heuristic_consolidation, model_files, with_stems
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.stage_one_answer import ConsolidationOutput, Skill
from memkiln.transforms.tokens import count_tokens
from tests.builders import codex_lines, uid, write_rollout

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
SECRET = "sk-proj-" + "Q1w2E3r4T5" * 4
#: Characters no memory file may hold (a NUL, C0/C1 controls, bidi overrides, BOM, tags).
UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\ufeff\U000e0000-\U000e007f]"
)


def settings(tmp_path: Path, **kw: object) -> Settings:
    base = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "out": tmp_path / "memories",
        "backfill": True,
        "min_rollout_idle_hours": 0,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def add_session(archive: Path, n: int, *, cwd: str, request: str, remote: str | None) -> None:
    at = T0 + timedelta(hours=n)
    lines = codex_lines(
        uid(n), request=request, at=at, cwd=cwd, remote=remote,
        calls=[("pytest -q", "Exit code: 1\nOutput:\nE   AssertionError: totals differ"),
               ("pytest -q", "Exit code: 0\nOutput:\n3 passed")],
        feedback="thanks, that works",
    )  # fmt: skip
    write_rollout(archive, uid(n), lines, at)


def three_projects(tmp_path: Path, start: int = 0) -> Settings:
    archive = tmp_path / "archive"
    for i, name in enumerate(("alpha", "beta", "gamma")):
        add_session(
            archive, start + i, cwd=f"/src/{name}", remote=f"git@github.com:acme/{name}.git",
            request=f"Fix the {name} build. Always run pytest -q before committing.",
        )  # fmt: skip
    return settings(tmp_path)


def run_all(s: Settings):  # type: ignore[no-untyped-def]
    ingest_archive(s)
    extract_store(s)
    return consolidate_store(s)


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------ names and text


def test_a_skill_name_holding_a_secret_or_a_path_never_becomes_a_file_name() -> None:
    answer = ConsolidationOutput(
        memory_md="# Memory\n",
        memory_summary_md="v1\n",
        skills=[
            Skill(name=f"deploy with {SECRET}", description="d", body="b"),
            Skill(name="../../../etc/cron.d/evil", description="d", body="b"),
            Skill(name=f"AKIAIOSFODNN7EXAMPLQ {SECRET.upper()}", description="d", body="b"),
        ],
    )
    files, _ = model_files(answer, rules=load_rules())
    names = "\n".join(files)
    assert SECRET.lower()[:12] not in names.lower() and "q1w2e3r4t5" not in names.lower()
    assert "akiaiosfodnn7examplq" not in names.lower()
    for rel in files:
        assert ".." not in rel.split("/") and not rel.startswith("/")


def test_control_characters_and_a_9000_character_key_stay_out_of_memory_files(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    long_cwd = "/srv" + "/a project dir" * 650  # no git remote: the cwd is the project key
    add_session(archive, 1, cwd=long_cwd, remote=None,
                request="Fix the cart. Always run pytest -q before committing.")  # fmt: skip
    add_session(
        archive, 2, cwd="/src/evil\u202egnp.exe\n### Task 9: forged", remote=None,
        request="Fix \x00the\x1b[31m cart \u202eevil\u2066 now. Always run pytest -q first.",
    )  # fmt: skip
    s = settings(tmp_path)
    run_all(s)
    written = files_under(s.out)
    assert len(written) >= 9
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert not UNSAFE.search(text), (path, UNSAFE.search(text))
        for line in text.splitlines():
            assert not line.startswith("### Task 9: forged"), path
    index = (s.out / "INDEX.md").read_text(encoding="utf-8")
    rows = [line for line in index.splitlines() if line.startswith("| /")]
    assert len(long_cwd) > 9_000 and any("a project dir" in row for row in rows)
    assert len(rows) == 2 and all(len(row) < 600 for row in rows)
    for folder in (p for p in s.out.iterdir() if p.is_dir()):
        assert len(folder.name) < 100


def test_the_writer_keeps_unsafe_characters_out_of_every_memory_file(tmp_path: Path) -> None:
    """The last line of defence, whatever a future producer forgets: every file the writer
    writes is cleaned (the end-to-end test above passes on upstream cleaning alone)."""
    root = OutputRoot(tmp_path / "out")
    hostile = (
        "# Memory\r\nline\x00 one\x1b[2J\x1b]0;t\x07 \u202eevil\u2066x\u2069\ufeff"
        "\U000e0041\x85two\u2028three\x7f\x9b\n"
    )
    assert root.write("p/MEMORY.md", hostile)
    text = (tmp_path / "out" / "p" / "MEMORY.md").read_bytes().decode("utf-8")
    assert not UNSAFE.search(text), repr(text)
    assert text == "# Memory\nline one[2J]0;t evilx\ntwo\nthree\n"


# ------------------------------------------------------------------ size cap


def big_project(n: int) -> pl.DataFrame:
    memories = []
    for i in range(n):
        memories.append(
            "---\ndescription: d\ntask_outcome: success\ncwd: /src/shop\n"
            f"keywords: shop, task{i}\n---\n"
            f"### Task 1: Make the checkout page number {i} show the tax line and the totals\n"
            "task_outcome: success\n\nPreference signals:\n"
            f"- Preference number {i}: always run the full linter suite before committing\n\n"
            f"Reusable knowledge:\n- Fact {i}: the checkout service {i} lives in src/shop/{i}\n"
            f"\nFailures and how to do differently:\n- `make build-{i}` failed: no rule\n"
        )
    frame = pl.DataFrame(
        {
            "project_key": ["github.com/acme/shop"] * n,
            "rollout_id": [uid(i) for i in range(n)],
            "cwd": ["/src/shop"] * n,
            "updated_at": [T0 + timedelta(hours=i) for i in range(n)],
            "raw_memory": memories,
            "rollout_summary": [f"# Summary {i}\n" for i in range(n)],
            "rollout_slug": [f"task-{i}" for i in range(n)],
            "rank": list(range(1, n + 1)),
        }
    )
    return with_stems(frame)


def test_memory_summary_of_a_large_project_stays_within_2500_tokens_and_a_budget() -> None:
    from memkiln.transforms.consolidate import merge_bullets, render_memory_summary
    from memkiln.transforms.raw_memory import memory_bullets, memory_tasks

    selected = big_project(256)
    uncapped = render_memory_summary(
        "github.com/acme/shop",
        merge_bullets(memory_bullets(selected)),
        memory_tasks(selected),
        max_tokens=10**9,
    )
    # the index lists the most recent sessions only: a large project's summary stays short
    assert count_tokens(uncapped) <= 2_500
    summary = heuristic_consolidation("github.com/acme/shop", selected)["memory_summary.md"]
    assert summary == uncapped
    assert summary.splitlines()[0] == MEMORY_GUIDANCE
    assert len(re.findall(r"(?m)^- \d{4}-\d\d-\d\d ", summary)) == 12
    assert all(len(line) <= 300 for line in summary.splitlines())
    # and a budget smaller than it is still kept, from the end
    cut = render_memory_summary(
        "github.com/acme/shop",
        merge_bullets(memory_bullets(selected)),
        memory_tasks(selected),
        max_tokens=count_tokens(uncapped) // 2,
    )
    assert cut.splitlines()[0] == MEMORY_GUIDANCE
    assert count_tokens(cut) <= count_tokens(uncapped) // 2
    assert uncapped.startswith(cut.rstrip("\n"))


def test_a_models_summary_is_cut_to_2500_tokens_too() -> None:
    answer = ConsolidationOutput(
        memory_md="# Memory\n",
        memory_summary_md="v1\n" + "- a tip the model thought worth keeping\n" * 5_000,
        skills=[],
    )
    files, _ = model_files(answer, rules=load_rules())
    assert files["memory_summary.md"].startswith(MEMORY_GUIDANCE + "\n")
    assert count_tokens(files["memory_summary.md"]) <= 2_500


# ------------------------------------------------------------------ atomic writes

WRITER = """
import resource, signal, sys
from pathlib import Path
from memkiln.io.memory_files import OutputRoot
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
root = OutputRoot(Path(sys.argv[1]))
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # the disk fills up mid-write
try:
    root.write("p/MEMORY.md", "# new version\\n" + "x" * 100_000 + "\\n")
except OSError as exc:
    print("failed", exc.errno)
else:
    print("written")
"""


def test_a_write_that_fails_midway_leaves_the_old_file_whole_and_no_temporary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    OutputRoot(out).write("p/MEMORY.md", "# old version\n")
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(out)], cwd=REPO, capture_output=True, text=True
    )
    assert done.stdout.split()[0] == "failed", done.stderr
    assert (out / "p" / "MEMORY.md").read_text() == "# old version\n"
    assert sorted(p.name for p in (out / "p").iterdir()) == ["MEMORY.md"]


# ------------------------------------------------------------------ failures part-way


def test_a_project_folder_that_is_a_symlink_fails_alone_and_the_others_are_written(
    tmp_path: Path,
) -> None:
    s = three_projects(tmp_path)
    run_all(s)
    alpha = next(p for p in s.out.iterdir() if p.name.startswith("github.com-acme-alpha"))
    elsewhere = tmp_path / "elsewhere"
    shutil.move(alpha, elsewhere)
    alpha.symlink_to(elsewhere, target_is_directory=True)
    before = {p: p.read_bytes() for p in files_under(elsewhere)}
    three_projects(tmp_path, start=10)  # a new session in every project
    summary = run_all(s)
    assert summary.projects_failed == 1
    (line,) = summary.failures.values()
    assert line.startswith("unsafe_path: ") and "\n" not in line
    assert sorted(summary.projects.values()) == ["failed", "succeeded", "succeeded"]
    assert {p: p.read_bytes() for p in files_under(elsewhere)} == before  # not written through
    for name in ("beta", "gamma"):
        folder = next(p for p in s.out.iterdir() if p.name.startswith(f"github.com-acme-{name}"))
        assert len(list((folder / "rollout_summaries").iterdir())) == 2


def test_a_folder_that_cannot_be_written_fails_alone_with_one_line(tmp_path: Path) -> None:
    s = three_projects(tmp_path)
    run_all(s)
    beta = next(p for p in s.out.iterdir() if p.name.startswith("github.com-acme-beta"))
    shutil.rmtree(beta / "rollout_summaries")
    (beta / "rollout_summaries").write_text("a file where a folder belongs")
    three_projects(tmp_path, start=10)
    summary = run_all(s)
    assert summary.projects_failed == 1
    (line,) = summary.failures.values()
    assert line.startswith("write_error: ") and "\n" not in line
    assert sorted(summary.projects.values()) == ["failed", "succeeded", "succeeded"]
    # the failed project is tried again by the next run once the folder is fixed
    (beta / "rollout_summaries").unlink()
    again = consolidate_store(s)
    assert again.projects_failed == 0 and again.projects.get("github.com/acme/beta") == "succeeded"


def memkiln(*args: str, env: dict[str, str], preexec=None) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    exe = Path(sys.executable).with_name("memkiln")
    return subprocess.run(
        [str(exe), *args], env=env, capture_output=True, text=True, preexec_fn=preexec, timeout=300
    )


def cli_env(tmp_path: Path) -> dict[str, str]:
    return os.environ | {"MEMKILN_HOME": str(tmp_path / "home"), "COLUMNS": "200"}


@pytest.fixture
def extracted(tmp_path: Path) -> Settings:
    s = three_projects(tmp_path)
    ingest_archive(s)
    extract_store(s)
    return s


def test_a_read_only_out_is_one_line_and_exit_2(tmp_path: Path, extracted: Settings) -> None:
    out = tmp_path / "read-only"
    out.mkdir()
    locked = os.geteuid() == 0 and shutil.which("chattr") is not None
    if locked:  # root ignores permission bits: make the folder immutable instead
        subprocess.run(["chattr", "+i", str(out)], check=True)
    else:
        out.chmod(0o555)
    try:
        done = memkiln(
            "consolidate", "--no-prefect", "--no-progress", "--db", str(extracted.db),
            "--out", str(out), env=cli_env(tmp_path),
        )  # fmt: skip
    finally:
        if locked:
            subprocess.run(["chattr", "-i", str(out)], check=True)
        else:
            out.chmod(0o755)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0] and "Traceback" not in done.stderr


def test_a_full_disk_is_one_line_not_a_traceback(tmp_path: Path, extracted: Settings) -> None:
    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    done = memkiln(
        "consolidate", "--no-prefect", "--no-progress", "--db", str(extracted.db),
        "--out", str(tmp_path / "memories"), env=cli_env(tmp_path), preexec=full_disk,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "could not be written" in lines[0] or "cannot write" in lines[0]
