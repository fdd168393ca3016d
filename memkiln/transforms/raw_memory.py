"""The raw-memory format: the ``raw_memory`` of a stage-one answer, written by a model (as the
stage-one system prompt describes it) or by the heuristic backend, and read by consolidation.

This module owns the format; nothing else spells it:

- ``write_raw_memory`` writes a ``RawMemory`` (the heuristic backend's writer);
- ``format_description`` is the example the system prompt shows the model
  (``templates/stage_one_system.md`` renders it): the writer's own output for placeholders;
- ``memory_bullets`` and ``memory_tasks`` read stored raw memories (consolidation's parser),
  vectorized over a frame of them.

A raw memory::

    ---
    description: <one line>
    task_outcome: <success | partial | fail | uncertain>
    cwd: <working directory>
    keywords: <comma-separated terms>
    ---
    ### Task 1: <title>
    task_outcome: <outcome>

    Preference signals:
    - <bullet>

    Reusable knowledge:
    - <bullet>

    Failures and how to do differently:
    - <bullet>

    References:
    - <bullet>

one ``### Task N`` block per task; a section without bullets is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

#: The outcomes a task (and the whole session) may have.
TASK_OUTCOMES = ("success", "partial", "fail", "uncertain")
#: A task's sections, in the order they are written: heading -> field of ``RawTask``.
SECTION_FIELDS = {
    "Preference signals": "preferences",
    "Reusable knowledge": "knowledge",
    "Failures and how to do differently": "failures",
    "References": "references",
}
#: The sections consolidation reads bullets from: heading -> the section's name there.
SECTIONS = {
    "Preference signals": "preferences",
    "Reusable knowledge": "knowledge",
    "Failures and how to do differently": "failures",
}
#: Lines as the parser recognizes them.
TASK_LINE = r"^### Task \d+:\s*(.*)$"
OUTCOME_LINE = r"^task_outcome:\s*(\S+)"
SECTION_LINE = r"^([A-Z][A-Za-z ]+):\s*$"
KEYWORDS_LINE = r"(?m)^keywords:\s*([^,\n]+)"
BULLET = "- "


@dataclass(frozen=True)
class RawTask:
    """One ``### Task N`` block."""

    title: str
    outcome: str
    preferences: tuple[str, ...] = ()
    knowledge: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class RawMemory:
    """A raw memory's fields: the front matter and the tasks."""

    description: str
    task_outcome: str
    cwd: str
    keywords: tuple[str, ...]
    tasks: tuple[RawTask, ...]


def write_raw_memory(memory: RawMemory) -> str:
    """The text of a raw memory (values are written as given: one line each, made safe by
    the caller)."""
    lines = [
        "---",
        f"description: {memory.description}",
        f"task_outcome: {memory.task_outcome}",
        f"cwd: {memory.cwd}",
        f"keywords: {', '.join(memory.keywords)}",
        "---",
    ]
    for n, task in enumerate(memory.tasks, start=1):
        lines += [f"### Task {n}: {task.title}", f"task_outcome: {task.outcome}", ""]
        for heading, name in SECTION_FIELDS.items():
            bullets: tuple[str, ...] = getattr(task, name)
            if bullets:
                lines += [f"{heading}:", *[f"{BULLET}{b}" for b in bullets], ""]
    return "\n".join(lines).rstrip() + "\n"


#: The placeholders of the format as the system prompt shows it.
FORMAT_EXAMPLE = RawMemory(
    description="<one line: what this session was about and what it produced>",
    task_outcome=f"<{' | '.join(TASK_OUTCOMES)}>",
    cwd="<the rollout's working directory>",
    keywords=("<5 to 12 comma-separated search terms>",),
    tasks=(
        RawTask(
            title="<short task name>",
            outcome=f"<{' | '.join(TASK_OUTCOMES)}>",
            preferences=(
                "<what the user asked for or objected to, in their words where it matters>",
            ),
            knowledge=("<fact, command, location or procedure that held up>",),
            failures=("<what failed, the error, and what to do instead>",),
            references=("<files, commands, URLs or ids that anchor the above>",),
        ),
    ),
)


def format_description() -> str:
    """The raw-memory format as the stage-one system prompt shows it (no final newline)."""
    return write_raw_memory(FORMAT_EXAMPLE).rstrip("\n")


def _lines(memories: pl.DataFrame, *columns: str) -> pl.DataFrame:
    return memories.select(*columns, line=pl.col("raw_memory").str.split("\n")).explode("line")


def memory_bullets(selected: pl.DataFrame) -> pl.DataFrame:
    """Every bullet of every raw memory with its section, task and source stem."""
    lines = _lines(selected, "rollout_id", "stem", "updated_at").with_columns(
        pl.col("line").str.strip_chars_end()
    )
    header = pl.col("line").str.extract(SECTION_LINE, 1)
    task = pl.col("line").str.extract(TASK_LINE, 1)
    return (
        lines.with_columns(
            section=pl.when(task.is_not_null())
            .then(pl.lit(""))
            .when(header.is_not_null())
            .then(header.replace_strict(SECTIONS, default=pl.lit("other"))),
        )
        .with_columns(pl.col("section").forward_fill().over("rollout_id"))
        .filter(
            pl.col("section").is_in(list(SECTIONS.values()))
            & pl.col("line").str.starts_with(BULLET)
        )
        .select(
            "rollout_id",
            "stem",
            "updated_at",
            "section",
            text=pl.col("line").str.slice(len(BULLET)).str.strip_chars(),
        )
        .filter(pl.col("text") != "")
    )


def memory_tasks(selected: pl.DataFrame) -> pl.DataFrame:
    """Each memory's tasks: title, outcome, group (the memory's first keyword), and the
    memory's keywords and outcome (its front matter)."""
    lines = _lines(selected, "rollout_id", "stem", "updated_at", "raw_memory")
    titles = lines.with_columns(
        title=pl.col("line").str.extract(TASK_LINE, 1),
        outcome=pl.col("line").str.extract(OUTCOME_LINE, 1),
    )
    group = (
        pl.col("raw_memory")
        .str.extract(KEYWORDS_LINE, 1)
        .str.strip_chars()
        .str.to_lowercase()
        .fill_null("general")
    )
    keywords = pl.col("raw_memory").str.extract(r"(?m)^keywords:[ \t]*([^\n]*)", 1)
    session_outcome = pl.col("raw_memory").str.extract(r"(?m)^task_outcome:\s*(\S+)", 1)
    return (
        titles.with_columns(pl.col("outcome").backward_fill().over("rollout_id"))
        .filter(pl.col("title").is_not_null())
        .with_columns(
            group=group,
            keywords=keywords.str.strip_chars().fill_null(""),
            session_outcome=session_outcome.fill_null("uncertain"),
        )
        .select(
            "rollout_id",
            "stem",
            "updated_at",
            "group",
            "title",
            "outcome",
            "keywords",
            "session_outcome",
        )
        .sort(["group", "updated_at", "title"], descending=[False, True, False])
    )
