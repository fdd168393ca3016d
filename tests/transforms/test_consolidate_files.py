"""The files of one project as consolidation hands them to the writer: a model's answer made
safe (redacted, a `v1` summary within its cap, skills under safe and unique names), the
heuristic backend's folder, and the hash that decides whether a project is written again."""

from __future__ import annotations

import hashlib
from functools import cache

import polars as pl

from memkiln.io.rules import load_rules
from memkiln.transforms.consolidate import (
    MEMORY_SUMMARY_MAX_TOKENS,
    deterministic_files,
    heuristic_consolidation,
    heuristic_files,
    input_hash,
    model_files,
)
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.names import project_dirname
from memkiln.transforms.prompts import CONSOLIDATION_PROMPT_VERSION
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.stage_one_answer import ConsolidationOutput, Skill
from memkiln.transforms.tokens import count_tokens
from tests.transforms.test_consolidate_layout import KEY, STEM_A, STEM_B, selected

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
REDACTED = "[REDACTED_SECRET]"


@cache
def rules() -> RuleSet:  # compiled in a test, not at import (see bench/mutation.py)
    return load_rules()


def answer(
    summary: str = "v1\n- keep it short", skills: list[Skill] | None = None
) -> ConsolidationOutput:
    return ConsolidationOutput(
        memory_md="\n# Memory\n\n- use pnpm\n\n", memory_summary_md=summary, skills=skills or []
    )


def test_a_model_answer_becomes_the_two_memory_files_each_ending_in_one_newline() -> None:
    files, skipped = model_files(answer("  v1\n- keep it short  \n\n"), rules=rules())
    assert files == {
        "MEMORY.md": "# Memory\n\n- use pnpm\n",
        "memory_summary.md": f"{MEMORY_GUIDANCE}\n\n- keep it short\n",
    }
    assert skipped == []


def test_a_summary_without_the_guidance_line_gets_it_first_and_loses_a_version_line() -> None:
    files, _ = model_files(answer("- keep it short"), rules=rules())
    assert files["memory_summary.md"] == f"{MEMORY_GUIDANCE}\n\n- keep it short\n"
    files, _ = model_files(answer(f"{MEMORY_GUIDANCE}\n- keep it short"), rules=rules())
    assert files["memory_summary.md"] == f"{MEMORY_GUIDANCE}\n- keep it short\n"


def test_a_summary_over_its_cap_is_cut_to_it() -> None:
    long = "v1\n" + "\n".join(
        f"- bullet {i} about the build and its flaky steps" for i in range(3_000)
    )
    files, _ = model_files(answer(long), rules=rules())
    text = files["memory_summary.md"]
    assert text.startswith(f"{MEMORY_GUIDANCE}\n\n- bullet 0 ") and text.endswith("\n")
    assert count_tokens(text) <= MEMORY_SUMMARY_MAX_TOKENS < count_tokens(long)
    assert "- bullet 2999 " in text  # cut in the middle: both ends are kept


def test_secrets_in_every_part_of_an_answer_are_redacted() -> None:
    output = ConsolidationOutput(
        memory_md=f"token {TOKEN}",
        memory_summary_md=f"v1\n- token {TOKEN}",
        skills=[Skill(name="deploy", description=f"uses {TOKEN}", body=f"export T={TOKEN}")],
    )
    files, _ = model_files(output, rules=rules())
    assert files["MEMORY.md"] == f"token {REDACTED}\n"
    assert files["memory_summary.md"] == f"{MEMORY_GUIDANCE}\n\n- token {REDACTED}\n"
    assert files["skills/deploy/SKILL.md"] == (
        f"---\nname: deploy\ndescription: uses {REDACTED}\n---\n\nexport T={REDACTED}\n"
    )
    assert all(TOKEN not in text for text in files.values())


def test_skills_get_safe_unique_folder_names_and_the_rest_are_listed_redacted() -> None:
    skills = [
        Skill(name="Run the  Tests!", description="how\n  to   test", body="\n  pnpm test  \n"),
        Skill(name="run-the-tests", description="again", body="twice"),  # same folder
        Skill(name="../..", description="nothing safe left", body="x"),
        Skill(name=f"leak {TOKEN}", description="a secret in the name", body="x"),
    ]
    files, skipped = model_files(answer(skills=skills), rules=rules())
    assert sorted(files) == [
        "MEMORY.md", "memory_summary.md",
        "skills/leak-redacted-secret/SKILL.md", "skills/run-the-tests/SKILL.md",
    ]  # fmt: skip
    assert files["skills/run-the-tests/SKILL.md"] == (
        "---\nname: run-the-tests\ndescription: how to test\n---\n\npnpm test\n"
    )
    assert files["skills/leak-redacted-secret/SKILL.md"].startswith(
        "---\nname: leak-redacted-secret\n"
    )
    assert skipped == ["run-the-tests", "../.."]


def test_the_heuristic_folder_holds_every_file_under_the_projects_folder() -> None:
    rows = selected()
    folder = project_dirname(KEY)
    files = heuristic_files(KEY, rows)
    expected = deterministic_files(KEY, rows) | heuristic_consolidation(KEY, rows)
    assert files == {f"{folder}/{name}": text for name, text in expected.items()}
    assert sorted(files) == sorted(
        f"{folder}/{name}"
        for name in (
            "MEMORY.md", "memory_summary.md", "raw_memories.md",
            f"rollout_summaries/{STEM_A}.md", f"rollout_summaries/{STEM_B}.md",
        )
    )  # fmt: skip


HASHED = ("rollout_id", "stem", "rank", "cwd", "input_hash", "raw_memory", "rollout_summary")


def hashed_rows() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rollout_id": ["b-2", "a-1"],
            "stem": ["s-b", "s-a"],
            "rank": [2, 1],
            "cwd": [None, "/home/me/shop"],
            "input_hash": ["h-b", "h-a"],
            "raw_memory": ["memory b", "memory a"],
            "rollout_summary": ["summary b", None],
            "updated_at": ["2026-10-02", "2026-10-01"],  # not an input of the files' text
        }
    )


def by_hand(rows: list[tuple[object, ...]], backend: str, model: str) -> str:
    """The documented recipe, written out: the backend, model and prompt version, then each
    session's hashed fields in rollout order, NUL-separated, each row closed by 0x01."""
    data = f"{backend}\0{model}\0{CONSOLIDATION_PROMPT_VERSION}".encode()
    for row in rows:
        data += "\0".join("" if v is None else str(v) for v in row).encode() + b"\1"
    return hashlib.sha256(data).hexdigest()


def test_the_input_hash_is_the_recipe_over_sessions_in_rollout_order() -> None:
    rows = [
        ("a-1", "s-a", 1, "/home/me/shop", "h-a", "memory a", None),
        ("b-2", "s-b", 2, None, "h-b", "memory b", "summary b"),
    ]
    frame = hashed_rows()
    assert input_hash(frame, backend="openai", model="m1") == by_hand(rows, "openai", "m1")
    assert input_hash(frame.reverse(), backend="openai", model="m1") == by_hand(
        rows, "openai", "m1"
    )


def test_the_input_hash_changes_with_every_input_and_only_with_them() -> None:
    frame = hashed_rows()
    base = input_hash(frame, backend="openai", model="m1")
    assert input_hash(frame, backend="heuristic", model="m1") != base
    assert input_hash(frame, backend="openai", model="m2") != base
    for column in HASHED:
        changed = frame.with_columns(
            pl.when(pl.col("rollout_id") == "a-1")
            .then(
                pl.lit("9" if column == "rank" else "changed").cast(
                    frame[column].dtype, strict=False
                )
            )
            .otherwise(pl.col(column))
            .alias(column)
        )
        assert input_hash(changed, backend="openai", model="m1") != base, column
    later = frame.with_columns(pl.lit("2027-01-01").alias("updated_at"))
    assert input_hash(later, backend="openai", model="m1") == base
    one_less = frame.filter(pl.col("rollout_id") == "a-1")
    assert input_hash(one_less, backend="openai", model="m1") != base
