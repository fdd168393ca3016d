"""Phase 2 as pure functions: per-project selection and the memory files' contents.

Nothing here writes a file: ``project_files`` returns ``{relative path: text}`` for one
project and the writer in ``memkiln.io.memory_files`` decides what changes on disk.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

import polars as pl

from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.names import project_dirname, skill_dirname, summary_stem
from memkiln.transforms.prompts import CONSOLIDATION_PROMPT_VERSION
from memkiln.transforms.raw_memory import memory_bullets, memory_tasks
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.stage_one_answer import ConsolidationOutput
from memkiln.transforms.text import clean_text, one_line
from memkiln.transforms.tokens import count_tokens, truncate_middle

MEMORY_SUMMARY_MAX_TOKENS = 2_500
#: Characters of a project key shown in a heading or an INDEX.md row (the folder name and
#: the store keep it whole).
KEY_SHOWN_CHARS = 120
#: Characters of a cwd, rollout id or title shown on one line of a memory file.
VALUE_SHOWN_CHARS = 300


def select_memories(outputs: pl.LazyFrame, usage: pl.LazyFrame, *, limit: int) -> pl.LazyFrame:
    """Per project, the outputs with text, ranked by usage count, then last usage, then
    session recency; at most ``limit``. Adds ``rank`` (1 = first)."""
    ranked = (
        outputs.filter(
            (pl.col("raw_memory").str.strip_chars() != "")
            & (pl.col("rollout_summary").str.strip_chars() != "")
            & pl.col("project_key").is_not_null()
        )
        .join(usage, on="rollout_id", how="left")
        .with_columns(pl.col("usage_count").fill_null(0))
        .sort(
            ["usage_count", "last_usage", "updated_at", "rollout_id"],
            descending=[True, True, True, False],
            nulls_last=True,
        )
        .with_columns(rank=pl.int_range(1, pl.len() + 1).over("project_key"))
    )
    return ranked.filter(pl.col("rank") <= limit)


def with_stems(selected: pl.DataFrame) -> pl.DataFrame:
    """Add each summary file's stem (Codex's naming rule; a pure function per id)."""
    stems = [
        summary_stem(rid, updated, slug)
        for rid, updated, slug in selected.select(
            "rollout_id", "updated_at", "rollout_slug"
        ).iter_rows()
    ]
    return selected.with_columns(stem=pl.Series(stems, dtype=pl.String))


def merge_bullets(bullets: pl.DataFrame) -> pl.DataFrame:
    """Merge near-duplicate bullets (same words, whatever the case, punctuation or order);
    each merged bullet keeps the newest wording and every source."""
    key = (
        pl.col("text")
        .str.to_lowercase()
        .str.replace_all(r"[^a-z0-9\s]+", " ")
        .str.strip_chars()
        .str.split(" ")
        .list.eval(pl.element().filter(pl.element() != ""))
        .list.unique()
        .list.sort()
        .list.join(" ")
    )
    return (
        bullets.with_columns(key=key)
        .sort("updated_at", descending=True)
        .group_by("section", "key", maintain_order=True)
        .agg(
            text=pl.col("text").first(),
            sources=pl.col("stem").unique().sort(),
            newest=pl.col("updated_at").max(),
        )
        .with_columns(n_sources=pl.col("sources").list.len())
        .sort(["section", "n_sources", "newest", "text"], descending=[False, True, True, False])
    )


def _source_refs(stems: list[str]) -> str:
    return ", ".join(f"rollout_summaries/{s}.md" for s in stems)


def render_summary_file(row: dict[str, object]) -> str:
    updated = row["updated_at"]
    cwd = row["cwd"] if isinstance(row["cwd"], str) else None
    return (
        f"rollout_id: {one_line(str(row['rollout_id']), VALUE_SHOWN_CHARS)}\n"
        f"updated_at: {updated.isoformat() if isinstance(updated, datetime) else 'unknown'}\n"
        f"cwd: {one_line(cwd, VALUE_SHOWN_CHARS) or 'unknown'}\n\n"
        f"{clean_text(str(row['rollout_summary'])).strip()}\n"
    )


def render_raw_memories(project_key: str, selected: pl.DataFrame) -> str:
    ordered = selected.sort(["updated_at", "rollout_id"], descending=[True, False], nulls_last=True)
    parts = [
        f"# Raw memories: {one_line(project_key, KEY_SHOWN_CHARS)}",
        "",
        f"{ordered.height} selected memories, most recently updated session first.",
        "",
    ]
    for i, row in enumerate(ordered.iter_rows(named=True), start=1):
        updated = row["updated_at"].isoformat() if row["updated_at"] else "unknown"
        parts += [
            f"## Memory {i}: {row['stem']}",
            "",
            f"rollout_id: {one_line(row['rollout_id'], VALUE_SHOWN_CHARS)}",
            f"updated_at: {updated}",
            f"cwd: {one_line(row['cwd'], VALUE_SHOWN_CHARS) or 'unknown'}",
            f"rollout_summary_file: rollout_summaries/{row['stem']}.md",
            "",
            clean_text(str(row["raw_memory"])).strip(),
            "",
        ]
    return "\n".join(parts).rstrip() + "\n"


def render_memory_md(
    project_key: str, selected: pl.DataFrame, merged: pl.DataFrame, task_rows: pl.DataFrame
) -> str:
    first = selected["updated_at"].min()
    last = selected["updated_at"].max()
    if isinstance(first, datetime) and isinstance(last, datetime):
        span = f"{first:%Y-%m-%d} to {last:%Y-%m-%d}"
    else:
        span = "unknown dates"
    out = [
        f"# Memory: {one_line(project_key, KEY_SHOWN_CHARS)}",
        "",
        f"Consolidated by memkiln from {selected.height} sessions ({span}). Every bullet names "
        "the rollout summaries it comes from.",
        "",
        "## Task groups",
        "",
    ]
    for (group,), rows in task_rows.group_by("group", maintain_order=True):
        out.append(f"### {one_line(group, VALUE_SHOWN_CHARS)}")
        for row in rows.iter_rows(named=True):
            out.append(
                f"- {one_line(row['title'], VALUE_SHOWN_CHARS)} — outcome: "
                f"{one_line(row['outcome'], 40) or 'uncertain'} "
                f"(from {_source_refs([row['stem']])})"
            )
        out.append("")
    titles = {
        "preferences": "User preferences",
        "knowledge": "Reusable knowledge",
        "failures": "Failures and how to avoid them",
    }
    for section, title in titles.items():
        rows = merged.filter(pl.col("section") == section)
        if rows.is_empty():
            continue
        out += [f"## {title}", ""]
        for text, sources in rows.select("text", "sources").iter_rows():
            out.append(f"- {one_line(text, 1_000)} (from {_source_refs(sources)})")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


#: Bullets of each kind ``memory_summary.md`` leads with, and the characters shown of each.
SUMMARY_PREFERENCES = 10
SUMMARY_PITFALLS = 8
SUMMARY_COMMANDS = 8
SUMMARY_KNOWLEDGE = 8
SUMMARY_BULLET_CHARS = 298  # with its "- ", a line of at most 300 characters
#: Failures of a look around the tree or of an edit tool: the agent's own slips, not pitfalls.
SLIP_BULLET = (
    r"^`(?:cd [^&;`]+&& ?)?(?:ls|cat|head|tail|sed -n|rg|grep|find|wc|nl|pwd|which|"
    r"apply_patch|applypatch|Get-Content|Get-ChildItem)\b"
)
#: Knowledge bullets that are a session's record, not advice.
RECORD_BULLET = r"^(?:Final answer|Commands that ran|Commands that worked|Files changed):"


def commands_that_worked(merged: pl.DataFrame) -> list[str]:
    """The commands of the ``Commands that worked:`` bullets, the ones from most sessions
    first (then in the bullets' order)."""
    rows = merged.filter(
        (pl.col("section") == "knowledge") & pl.col("text").str.starts_with("Commands that worked:")
    )
    if rows.is_empty():
        return []
    counted = (
        rows.select(command=pl.col("text").str.extract_all(r"`[^`\n]+`"), sources="sources")
        .with_row_index("order")
        .explode("command")
        .explode("sources")
        .drop_nulls("command")
        .group_by("command")
        .agg(sessions=pl.col("sources").n_unique(), order=pl.col("order").min())
        .sort(["sessions", "order", "command"], descending=[True, False, False])
    )
    return counted["command"].head(SUMMARY_COMMANDS).to_list()


#: Sessions listed in the index of ``memory_summary.md``, most recent first.
SUMMARY_SESSIONS = 12
#: Characters of one line of ``memory_summary.md``.
SUMMARY_LINE_CHARS = 300
#: Keywords shown per session in the index.
SUMMARY_KEYWORDS = 6


def _session_index(task_rows: pl.DataFrame) -> list[str]:
    """One line per session, most recent first: its topic title, keywords and outcome, and
    its summary file."""
    if task_rows.is_empty():
        return []
    defaults = {
        "rollout_id": pl.col("stem"),
        "keywords": pl.lit(""),
        "session_outcome": pl.col("outcome"),
    }
    missing = {k: v for k, v in defaults.items() if k not in task_rows.columns}
    task_rows = task_rows.with_columns(**missing) if missing else task_rows
    sessions = (
        task_rows.group_by("rollout_id", maintain_order=True)
        .agg(
            pl.col("stem").first(),
            pl.col("updated_at").first(),
            pl.col("title").first(),
            pl.col("keywords").first(),
            pl.col("session_outcome").first(),
        )
        .sort(["updated_at", "rollout_id"], descending=[True, False], nulls_last=True)
        .head(SUMMARY_SESSIONS)
    )
    out = []
    for row in sessions.iter_rows(named=True):
        when = f"{row['updated_at']:%Y-%m-%d}" if row["updated_at"] else "undated"
        words = [w.strip() for w in (row["keywords"] or "").split(",") if w.strip()]
        keys = ", ".join(words[:SUMMARY_KEYWORDS])
        title = one_line(row["title"], 90)
        outcome = one_line(row["session_outcome"], 20) or "uncertain"
        line = f"- {when} {title} ({outcome})"
        line += f"; keywords: {one_line(keys, 120)}" if keys else ""
        out.append(one_line(f"{line}: rollout_summaries/{row['stem']}.md", SUMMARY_LINE_CHARS))
    return out


def render_memory_summary(
    project_key: str, merged: pl.DataFrame, task_rows: pl.DataFrame, *, max_tokens: int
) -> str:
    """``memory_summary.md``: the guidance line first (memory is a hint; the repository and
    the user's words win; verify); then what to do and avoid in this project (the user's
    preferences, pitfalls, the check commands that exited 0, decisions and facts the user
    stated); then an index of the sessions by topic title and keywords, most recent first;
    every line at most ``SUMMARY_LINE_CHARS``; cut to ``max_tokens`` from the end."""
    head = [
        MEMORY_GUIDANCE,
        "",
        f"# Memory summary: {one_line(project_key, KEY_SHOWN_CHARS)}",
        "",
        "MEMORY.md and rollout_summaries/ hold the details and the sessions each line comes from.",
        "",
    ]

    def texts(section: str, n: int) -> list[str]:
        rows = merged.filter(pl.col("section") == section)
        if section == "knowledge":
            rows = rows.filter(~pl.col("text").str.contains(RECORD_BULLET))
        if section == "failures":
            rows = rows.filter(~pl.col("text").str.contains(SLIP_BULLET))
        return [one_line(t, SUMMARY_BULLET_CHARS) for t in rows.head(n)["text"].to_list()]

    lists = [
        ("Do: the user's preferences, in their words", texts("preferences", SUMMARY_PREFERENCES)),
        ("Avoid: what failed, and what worked instead", texts("failures", SUMMARY_PITFALLS)),
        ("Commands that exited 0, checks first", commands_that_worked(merged)),
        ("Decisions and facts the user stated", texts("knowledge", SUMMARY_KNOWLEDGE)),
    ]
    body: list[str] = []
    for title, bullets in lists:
        if bullets:
            body += [f"## {title}", "", *[f"- {b}" for b in bullets], ""]
    index = ["## Sessions in memory (most recent first)", "", *_session_index(task_rows), ""]

    def text(lines: list[str]) -> str:
        return "\n".join(lines).rstrip() + "\n"

    lines = head + body + index
    # keep the longest prefix that fits: the oldest index entries go first, then the do and
    # avoid lists from their end (a binary search: counting is the costly part for a large project)
    if count_tokens(text(lines)) > max_tokens:
        fits, over = len(head), len(lines)
        while over - fits > 1:
            mid = (fits + over) // 2
            if count_tokens(text(lines[:mid])) <= max_tokens:
                fits = mid
            else:
                over = mid
        lines = lines[:fits]
    out = text(lines)
    if count_tokens(out) > max_tokens:  # the head alone is over: the guidance, the rest cut
        first = MEMORY_GUIDANCE + "\n"
        rest, _ = truncate_middle(
            out.removeprefix(first), max(max_tokens - count_tokens(first) - 1, 0)
        )
        rest = rest if rest.endswith("\n") else rest + "\n"
        # the guidance line is the floor, whatever the budget
        out = first + rest if count_tokens(first + rest) <= max_tokens else first
    return out


def deterministic_files(project_key: str, selected: pl.DataFrame) -> dict[str, str]:
    files = {"raw_memories.md": render_raw_memories(project_key, selected)}
    for row in selected.iter_rows(named=True):
        files[f"rollout_summaries/{row['stem']}.md"] = render_summary_file(row)
    return files


def heuristic_consolidation(project_key: str, selected: pl.DataFrame) -> dict[str, str]:
    """MEMORY.md and memory_summary.md without a model: merged bullets, grouped tasks."""
    merged = merge_bullets(memory_bullets(selected))
    task_rows = memory_tasks(selected)
    return {
        "MEMORY.md": render_memory_md(project_key, selected, merged, task_rows),
        "memory_summary.md": render_memory_summary(
            project_key, merged, task_rows, max_tokens=MEMORY_SUMMARY_MAX_TOKENS
        ),
    }


def input_hash(selected: pl.DataFrame, *, backend: str, model: str) -> str:
    """Everything a project's files depend on, hashed: a project with the same hash is left
    alone."""
    digest = hashlib.sha256(f"{backend}\0{model}\0{CONSOLIDATION_PROMPT_VERSION}".encode())
    ordered = selected.sort("rollout_id").select(
        "rollout_id", "stem", "rank", "cwd", "input_hash", "raw_memory", "rollout_summary"
    )
    for row in ordered.iter_rows():
        digest.update("\0".join("" if v is None else str(v) for v in row).encode())
        digest.update(b"\1")
    return digest.hexdigest()


def _skill_file(name: str, description: str, body: str) -> str:
    described = " ".join(description.split())
    return f"---\nname: {name}\ndescription: {described}\n---\n\n{body.strip()}\n"


def model_files(output: ConsolidationOutput, *, rules: RuleSet) -> tuple[dict[str, str], list[str]]:
    """The files of a model's answer, redacted, with safe names; and the skipped names."""
    summary = redact_text(output.memory_summary_md, rules=rules).strip()
    summary = summary.removeprefix("v1\n") if summary.startswith("v1\n") else summary
    if not summary.startswith(MEMORY_GUIDANCE):
        summary = MEMORY_GUIDANCE + "\n\n" + summary
    summary, _ = truncate_middle(summary + "\n", MEMORY_SUMMARY_MAX_TOKENS)
    files = {
        "MEMORY.md": redact_text(output.memory_md, rules=rules).strip() + "\n",
        "memory_summary.md": summary if summary.endswith("\n") else summary + "\n",
    }
    skipped = []
    for skill in output.skills:
        # the name is redacted before it becomes a folder, and the folder name again after
        # (sanitizing must not turn a name into something a secret rule matches)
        name = skill_dirname(redact_text(skill.name, rules=rules))
        if name is not None and redact_text(name, rules=rules) != name:
            name = None
        if name is None or f"skills/{name}/SKILL.md" in files:
            skipped.append(redact_text(skill.name, rules=rules))
            continue
        files[f"skills/{name}/SKILL.md"] = _skill_file(
            name,
            redact_text(skill.description, rules=rules),
            redact_text(skill.body, rules=rules),
        )
    return files, skipped


def heuristic_files(project_key: str, selected: pl.DataFrame) -> dict[str, str]:
    """Every file of a project's folder under the heuristic backend, by path under the
    output root: pure work on the project's selected memories, so it can run as a task
    anywhere (``memkiln.flows.tasks.render_task``)."""
    folder = project_dirname(project_key)
    files = {f"{folder}/{k}": v for k, v in deterministic_files(project_key, selected).items()}
    consolidated = heuristic_consolidation(project_key, selected)
    return files | {f"{folder}/{k}": v for k, v in consolidated.items()}


def render_index(projects: pl.DataFrame) -> str:
    """``INDEX.md``: ``project_key, folder, sessions, memories, last_update`` per project."""
    out = [
        "# memkiln memory index",
        "",
        "| project | folder | sessions | memories | last update |",
        "|---|---|---|---|---|",
    ]
    for row in projects.sort("project_key").iter_rows(named=True):
        last = row["last_update"]
        when = f"{last:%Y-%m-%d %H:%M}" if last else ""
        name = one_line(row["project_key"], KEY_SHOWN_CHARS).replace("|", "/")
        link = f"[{row['folder']}]({row['folder']}/memory_summary.md)"
        out.append(f"| {name} | {link} | {row['sessions']} | {row['memories']} | {when} |")
    return "\n".join(out) + "\n"
