"""The raw-memory format has one owner: what the writer writes, the parser reads back, and
the stage-one system prompt shows the model the writer's own output."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from memkiln.transforms.prompts import stage_one_system
from memkiln.transforms.raw_memory import (
    FORMAT_EXAMPLE,
    SECTIONS,
    RawMemory,
    RawTask,
    format_description,
    memory_bullets,
    memory_tasks,
    write_raw_memory,
)

TEMPLATE = Path(__file__).resolve().parents[2] / "memkiln" / "templates" / "stage_one_system.md"
T = datetime(2026, 10, 1, tzinfo=UTC)

MEMORY = RawMemory(
    description="Fix the flaky login test and speed up CI",
    task_outcome="partial",
    cwd="/srv/shop",
    keywords=("Testing", "ci", "login"),
    tasks=(
        RawTask(
            title="Fix the flaky login test",
            outcome="success",
            preferences=("Always run the linter first.",),
            knowledge=("Fact: the API runs on port 8080", "Files changed: src/app.py"),
            failures=("`npm test` failed: npm missing; `pnpm test` worked",),
            references=("rollout r1", "file src/app.py"),
        ),
        RawTask(title="Speed up CI", outcome="fail", knowledge=("CI caches ~/.cache/pnpm",)),
        RawTask(title="Say thanks", outcome="uncertain"),
    ),
)


def frame(*memories: RawMemory) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rollout_id": [f"r{i}" for i in range(len(memories))],
            "stem": [f"stem-{i}" for i in range(len(memories))],
            "updated_at": [T] * len(memories),
            "raw_memory": [write_raw_memory(m) for m in memories],
        }
    )


def test_what_the_writer_writes_the_parser_reads_back() -> None:
    selected = frame(MEMORY)

    tasks = memory_tasks(selected)
    bullets = memory_bullets(selected)

    assert tasks.select("title", "outcome").rows() == [
        (t.title, t.outcome) for t in sorted(MEMORY.tasks, key=lambda t: t.title)
    ]
    assert set(tasks["group"]) == {MEMORY.keywords[0].lower()}
    # every bullet of the sections consolidation reads, in the order written
    expected = [
        (section, bullet)
        for task in MEMORY.tasks
        for heading, section in SECTIONS.items()
        for bullet in getattr(task, section)
    ]
    assert bullets.select("section", "text").rows() == expected
    assert set(bullets["stem"]) == {"stem-0"}


def test_the_front_matter_holds_every_field_on_its_own_line() -> None:
    text = write_raw_memory(MEMORY)
    head = text.split("---\n")[1].splitlines()
    assert head == [
        f"description: {MEMORY.description}",
        f"task_outcome: {MEMORY.task_outcome}",
        f"cwd: {MEMORY.cwd}",
        f"keywords: {', '.join(MEMORY.keywords)}",
    ]
    # a section without bullets is left out, and so is a task's empty list
    third = text.split("### Task 3: Say thanks\n", 1)[1]
    assert third == "task_outcome: uncertain\n"


def test_a_memory_without_tasks_parses_to_no_task_and_no_bullet() -> None:
    empty = RawMemory("d", "success", "/x", (), ())
    selected = frame(empty)
    assert memory_tasks(selected).is_empty()
    assert memory_bullets(selected).is_empty()


def test_the_system_prompt_shows_the_writers_output_for_the_placeholders() -> None:
    shown = "\n".join("  " + line if line else "" for line in format_description().splitlines())
    assert f"  ```\n{shown}\n  ```\n" in stage_one_system()
    # the template does not spell the format itself: the module is its one owner
    template = TEMPLATE.read_text(encoding="utf-8")
    assert "### Task 1:" not in template and "Preference signals:" not in template
    assert "raw_memory_format" in template


def test_the_format_example_parses_to_its_placeholders() -> None:
    selected = frame(FORMAT_EXAMPLE)
    (task,) = FORMAT_EXAMPLE.tasks
    assert memory_tasks(selected).select("title", "outcome").rows() == [
        (task.title, task.outcome.split()[0])  # the parser reads the first word
    ]
    assert memory_bullets(selected)["section"].to_list() == list(SECTIONS.values())
