"""The offline extractor: useful output from evidence, the no-op answer when there is none."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from memkiln.io.store import fetch_pl
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts, extract_heuristic
from tests.builders import codex_lines, uid, write_rollout


def extract_file(tmp_path: Path, lines: list[dict]) -> object:
    at = datetime(2026, 10, 1, tzinfo=UTC)
    write_rollout(tmp_path / "a", uid(1), lines, at)
    ingest_archive(Settings(archive=tmp_path / "a", db=tmp_path / "m.duckdb"))
    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        items = fetch_pl(con, "select * from items order by seq")
    kept = filter_memory_items(items.lazy()).collect()
    return extract_heuristic(kept, RolloutFacts(uid(1), "/home/dev/shop", at))


def test_requests_preferences_failures_commands_and_feedback_are_all_in_the_memory(
    tmp_path: Path,
) -> None:
    lines = codex_lines(
        uid(1),
        request="Fix the flaky checkout test. Please always run the linter first. We use pnpm, not npm.",
        at=datetime(2026, 10, 1, tzinfo=UTC),
        calls=[
            ("npm test", "Exit code: 127\nOutput:\nbash: npm: command not found"),
            ("pnpm test", "Exit code: 0\nOutput:\n12 passed"),
        ],
        answer="Switched the test to pnpm; all 12 tests pass.",
        feedback="thanks, works now",
    )
    out = extract_file(tmp_path, lines)
    raw = out.raw_memory  # type: ignore[attr-defined]
    assert raw.startswith("---\ndescription: Fix the flaky checkout test.")
    assert "task_outcome: success" in raw
    assert "Please always run the linter first" in raw
    assert "We use pnpm, not npm" in raw
    # the error quoted as data, then the fix that exited 0
    assert "`npm test` failed with `bash: npm: command not found`; then `pnpm test` exited 0" in raw
    assert "Commands that worked: `pnpm test`" in raw
    assert "Final answer:" not in raw  # the agent's answer is not copied into memory
    summary = out.rollout_summary  # type: ignore[attr-defined]
    assert summary.startswith("# Fix the flaky checkout test.")
    assert "Outcome: success" in summary
    assert out.rollout_slug == "flaky-checkout-test"  # type: ignore[attr-defined]


def test_a_session_with_nothing_durable_gets_the_no_op_answer(tmp_path: Path) -> None:
    lines = codex_lines(uid(1), request="hi", at=datetime(2026, 10, 1, tzinfo=UTC), answer="Hello!")
    out = extract_file(tmp_path, lines)
    assert out.is_noop  # type: ignore[attr-defined]
    assert (out.raw_memory, out.rollout_summary, out.rollout_slug) == ("", "", None)  # type: ignore[attr-defined]


@pytest.mark.corpus
def test_heuristic_over_every_codex_corpus_file(ingested_corpus: Path) -> None:
    # the sessions of the corpus' codex folder, from the shared ingest of the whole corpus
    codex = f"{ingested_corpus / 'corpus' / 'codex'}/%"
    with duckdb.connect(str(ingested_corpus / "m.duckdb"), read_only=True) as con:
        rollouts = fetch_pl(
            con,
            "select rollout_id, cwd, updated_at, n_user_messages from rollouts "
            "where path like $codex",
            {"codex": codex},
        )
        items = fetch_pl(
            con,
            "select * exclude (payload_json) from items where rollout_id in "
            "(select rollout_id from rollouts where path like $codex)",
            {"codex": codex},
        )
    assert rollouts.height == len(list((ingested_corpus / "corpus" / "codex").rglob("*.jsonl")))
    kept = filter_memory_items(items.lazy()).collect()
    with_failures = noops = 0
    for rid, cwd, updated, n_users in rollouts.iter_rows():
        mine = kept.filter(pl.col("rollout_id") == rid)
        out = extract_heuristic(mine, RolloutFacts(rid, cwd, updated))
        outputs = mine.filter(pl.col("item_type") == "function_call_output")["text"].drop_nulls()
        failed = outputs.str.contains(r"Exit code: [1-9]|exited with code [1-9]").sum()
        if n_users == 0 or mine.height == 0:
            assert out.is_noop, rid
            noops += 1
        elif failed and mine.filter(pl.col("role") == "user").height and not out.is_noop:
            with_failures += 1
            assert "Failures and how to do differently:" in out.raw_memory, rid
        elif failed and mine.filter(pl.col("role") == "user").height:
            # a failure is remembered only from a task that reached its end: a session that
            # stopped while a call ran, with nothing else durable, is the no-op answer
            calls = mine.filter(pl.col("item_type") == "function_call")["call_id"]
            answered = set(mine.filter(pl.col("item_type") == "function_call_output")["call_id"])
            assert calls.len() and calls[-1] not in answered, rid
        assert json.dumps(out.model_dump())  # serializable, no surprises
    assert with_failures >= 10 and noops >= 1


def test_a_later_unrelated_success_is_not_given_as_the_fix_of_a_failure(tmp_path: Path) -> None:
    lines = codex_lines(
        uid(1),
        request="Find where the tax rounding happens in this project and explain it.",
        at=datetime(2026, 10, 1, tzinfo=UTC),
        calls=[
            ("git status --short", "Exit code: 128\nOutput:\nfatal: not a git repository"),
            ("rg --files", "Exit code: 0\nOutput:\nsrc/tax.py"),
        ],
        answer="Rounding happens in src/tax.py, in round_line().",
    )
    raw = extract_file(tmp_path, lines).raw_memory  # type: ignore[attr-defined]
    assert "`git status --short` failed with `fatal: not a git repository`" in raw
    assert "then `rg --files` exited 0" not in raw


def test_a_follow_up_that_is_a_new_task_is_not_feedback(tmp_path: Path) -> None:
    lines = codex_lines(
        uid(1),
        request="Add a retry to the image loader.",
        at=datetime(2026, 10, 1, tzinfo=UTC),
        calls=[("pytest -q tests/test_images.py", "Exit code: 0\nOutput:\n3 passed")],
        answer="Added a retry with backoff; the image tests pass.",
        feedback="Now make the gallery page faster. Thumbnails often fail to load and it looks broken.",
    )
    raw = extract_file(tmp_path, lines).raw_memory  # type: ignore[attr-defined]
    # the new task is a segment of its own that nobody acted on; the first task's outcome
    # comes from its passing tests, not from the words "fail" and "broken" that follow
    assert "task_outcome: fail" not in raw
    assert "### Task 1: Add a retry to the image loader.\ntask_outcome: success" in raw
    assert "### Task 2" not in raw


@pytest.mark.parametrize(
    ("failed", "later", "related"),
    [
        ("npm test", "pnpm test", True),
        ("cd /w/pi && npm run check 2>&1", "cd /w/pi && npm run check 2>&1", True),
        ("cat pkg/node_modules/cli/package.json", "cat node_modules/cli/package.json", True),
        ("head -50 /w/CHANGELOG.md", 'find /w -name "CHANGELOG.md"', True),
        ("git status --short", "rg --files", False),
        ("git push origin HEAD:main", "git checkout --theirs src/a.ts", False),
        ("npm run check 2>&1", "npm run build 2>&1", False),
        ("Get-Content app\\events\\page.tsx", "Get-Content app\\layout.tsx", False),
        (
            "Get-Command git,curl -ErrorAction SilentlyContinue",
            "Get-ChildItem -Recurse sessions -ErrorAction SilentlyContinue",
            False,
        ),
    ],
)
def test_a_fix_is_a_later_command_that_shares_the_program_and_first_argument_or_an_argument(
    failed: str, later: str, related: bool
) -> None:
    from memkiln.transforms.heuristic import _related

    assert _related(failed, later) is related
