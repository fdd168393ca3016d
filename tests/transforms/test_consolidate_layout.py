"""The memory files of one project, pinned as the user reads them.

Mutation testing showed that the headings, the line formats, the order of sections and
the sources named on each bullet of the consolidated files could change without a test
failing. These tests fix the whole text for a small project (two sessions, plain values),
and the order in which memory_summary.md gives up lines when it is over its budget.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.consolidate import (
    deterministic_files,
    heuristic_consolidation,
    merge_bullets,
    render_index,
    render_memory_summary,
    select_memories,
    with_stems,
)
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.raw_memory import memory_bullets, memory_tasks
from memkiln.transforms.tokens import count_tokens

T = datetime(2026, 10, 1, 9, 30, tzinfo=UTC)
A = "019b0000-0000-7000-8000-000000000001"
B = "019b0000-0000-7000-8000-000000000002"
KEY = "github.com/acme/shop"
MEMORY_A = (
    "---\nkeywords: Testing, ci\n---\n### Task 1: Fix the flaky test\ntask_outcome: success\n\n"
    "Preference signals:\n- Always run the linter first.\n\n"
    "Reusable knowledge:\n- Fact: the API runs on port 8080\n- Files changed: src/app.py\n\n"
    "Failures and how to do differently:\n- `npm test` failed: npm missing; `pnpm test` worked\n"
)
MEMORY_B = (
    "---\nkeywords: deploy\n---\n### Task 1: Ship the release\ntask_outcome: partial\n"
    "### Task 2: Tag it\n\nPreference signals:\n- always run the LINTER first\n"
    "- Keep commits small\n\nReferences:\n- not a section bullet\n"
)


def selected() -> pl.DataFrame:
    return with_stems(
        pl.DataFrame(
            {
                "project_key": [KEY, KEY],
                "rollout_id": [A, B],
                "cwd": ["/home/me/shop", None],
                "updated_at": [T, T + timedelta(days=2)],
                "raw_memory": [MEMORY_A, MEMORY_B],
                "rollout_summary": ["  Fixed the flaky test.  ", "Shipped 1.2."],
                "rollout_slug": ["Fix flaky test", None],
            }
        )
    )


# UUIDv7 time 0x019b00000000 ms = 2025-12-08T22:05:58Z; low 32 bits 1 and 2 -> 0001, 0002.
STEM_A = "2025-12-08T22-05-58-0001-fix_flaky_test"
STEM_B = "2025-12-08T22-05-58-0002"

RAW_MEMORIES = """\
# Raw memories: github.com/acme/shop

2 selected memories, most recently updated session first.

## Memory 1: 2025-12-08T22-05-58-0002

rollout_id: 019b0000-0000-7000-8000-000000000002
updated_at: 2026-10-03T09:30:00+00:00
cwd: unknown
rollout_summary_file: rollout_summaries/2025-12-08T22-05-58-0002.md

---
keywords: deploy
---
### Task 1: Ship the release
task_outcome: partial
### Task 2: Tag it

Preference signals:
- always run the LINTER first
- Keep commits small

References:
- not a section bullet

## Memory 2: 2025-12-08T22-05-58-0001-fix_flaky_test

rollout_id: 019b0000-0000-7000-8000-000000000001
updated_at: 2026-10-01T09:30:00+00:00
cwd: /home/me/shop
rollout_summary_file: rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md

---
keywords: Testing, ci
---
### Task 1: Fix the flaky test
task_outcome: success

Preference signals:
- Always run the linter first.

Reusable knowledge:
- Fact: the API runs on port 8080
- Files changed: src/app.py

Failures and how to do differently:
- `npm test` failed: npm missing; `pnpm test` worked
"""

SUMMARY_A = """\
rollout_id: 019b0000-0000-7000-8000-000000000001
updated_at: 2026-10-01T09:30:00+00:00
cwd: /home/me/shop

Fixed the flaky test.
"""

SUMMARY_B = """\
rollout_id: 019b0000-0000-7000-8000-000000000002
updated_at: 2026-10-03T09:30:00+00:00
cwd: unknown

Shipped 1.2.
"""

MEMORY_MD = """\
# Memory: github.com/acme/shop

Consolidated by memkiln from 2 sessions (2026-10-01 to 2026-10-03). Every bullet names the rollout summaries it comes from.

## Task groups

### deploy
- Ship the release — outcome: partial (from rollout_summaries/2025-12-08T22-05-58-0002.md)
- Tag it — outcome: uncertain (from rollout_summaries/2025-12-08T22-05-58-0002.md)

### testing
- Fix the flaky test — outcome: success (from rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md)

## User preferences

- always run the LINTER first (from rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md, rollout_summaries/2025-12-08T22-05-58-0002.md)
- Keep commits small (from rollout_summaries/2025-12-08T22-05-58-0002.md)

## Reusable knowledge

- Fact: the API runs on port 8080 (from rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md)
- Files changed: src/app.py (from rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md)

## Failures and how to avoid them

- `npm test` failed: npm missing; `pnpm test` worked (from rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md)
"""

MEMORY_SUMMARY = f"""\
{MEMORY_GUIDANCE}

# Memory summary: github.com/acme/shop

MEMORY.md and rollout_summaries/ hold the details and the sessions each line comes from.

## Do: the user's preferences, in their words

- always run the LINTER first
- Keep commits small

## Avoid: what failed, and what worked instead

- `npm test` failed: npm missing; `pnpm test` worked

## Decisions and facts the user stated

- Fact: the API runs on port 8080

## Sessions in memory (most recent first)

- 2026-10-03 Ship the release (partial); keywords: deploy: rollout_summaries/2025-12-08T22-05-58-0002.md
- 2026-10-01 Fix the flaky test (success); keywords: Testing, ci: rollout_summaries/2025-12-08T22-05-58-0001-fix_flaky_test.md
"""

INDEX = """\
# memkiln memory index

| project | folder | sessions | memories | last update |
|---|---|---|---|---|
| /home/me/a/b | [f2](f2/memory_summary.md) | 1 | 0 |  |
| github.com/acme/shop | [f1](f1/memory_summary.md) | 3 | 2 | 2026-10-01 09:30 |
"""


def test_the_deterministic_files_of_a_project() -> None:
    assert deterministic_files(KEY, selected()) == {
        "raw_memories.md": RAW_MEMORIES,
        f"rollout_summaries/{STEM_A}.md": SUMMARY_A,
        f"rollout_summaries/{STEM_B}.md": SUMMARY_B,
    }


def test_memory_md_and_the_summary_of_a_project() -> None:
    files = heuristic_consolidation(KEY, selected())
    assert files["MEMORY.md"] == MEMORY_MD
    assert files["memory_summary.md"] == MEMORY_SUMMARY


def test_the_index_lists_projects_in_order_and_keeps_the_table_whole() -> None:
    projects = pl.DataFrame(
        {
            "project_key": [KEY, "/home/me/a|b"],
            "folder": ["f1", "f2"],
            "sessions": [3, 1],
            "memories": [2, 0],
            "last_update": [T, None],
        }
    )
    assert render_index(projects) == INDEX


def _summary(max_tokens: int) -> str:
    sel = selected()
    return render_memory_summary(
        KEY, merge_bullets(memory_bullets(sel)), memory_tasks(sel), max_tokens=max_tokens
    )


def test_an_over_budget_summary_drops_the_oldest_entries_first() -> None:
    full = _summary(10_000)
    assert full == MEMORY_SUMMARY
    cut = _summary(count_tokens(full) - 1)
    assert count_tokens(cut) <= count_tokens(full) - 1
    assert full.startswith(cut.rstrip("\n"))
    assert "Ship the release (partial)" in cut
    assert "Fix the flaky test (success)" not in cut


def test_a_budget_smaller_than_the_head_still_opens_with_the_guidance_line() -> None:
    guidance = MEMORY_GUIDANCE + "\n"
    assert _summary(1) == guidance  # the guidance line is the floor, whatever the budget
    for budget in (40, 50, 60):
        cut = _summary(budget)
        assert cut.startswith(guidance) and "tokens truncated" in cut
        assert count_tokens(cut) <= budget
    assert _summary(70).startswith(guidance + "\n# Memory summary")


def test_memories_without_text_or_project_are_not_selected_and_ranks_start_at_one() -> None:
    outputs = pl.DataFrame(
        {
            "project_key": ["p", "p", "p", None],
            "rollout_id": ["ok", "no-memory", "no-summary", "no-project"],
            "updated_at": [T, T, T, T],
            "raw_memory": ["m", "  ", "m", "m"],
            "rollout_summary": ["s", "s", "\n", "s"],
        }
    )
    usage = pl.DataFrame(
        {"rollout_id": [], "usage_count": [], "last_usage": []},
        schema={
            "rollout_id": pl.String,
            "usage_count": pl.Int64,
            "last_usage": pl.Datetime("us", "UTC"),
        },
    )
    out = select_memories(outputs.lazy(), usage.lazy(), limit=5).collect()
    assert out.select("rollout_id", "rank", "usage_count").rows() == [("ok", 1, 0)]


def test_undated_sessions_say_unknown_and_come_last() -> None:
    sel = with_stems(
        pl.DataFrame(
            {
                "project_key": [KEY, KEY],
                "rollout_id": ["undated", A],
                "cwd": [None, None],
                "updated_at": pl.Series([None, T], dtype=pl.Datetime("us", "UTC")),
                "raw_memory": ["### Task 1: Old work\n", "### Task 1: New work\n"],
                "rollout_summary": ["s", "s"],
                "rollout_slug": [None, None],
            }
        )
    )
    files = deterministic_files(KEY, sel)
    undated = next(v for k, v in files.items() if k.startswith("rollout_summaries/1970-"))
    assert "updated_at: unknown\n" in undated
    raw = files["raw_memories.md"]
    assert raw.index("rollout_id: " + A) < raw.index("rollout_id: undated")
    assert "updated_at: unknown\n" in raw
    memory_md = heuristic_consolidation(KEY, sel.filter(pl.col("rollout_id") == "undated"))
    assert "(unknown dates)" in memory_md["MEMORY.md"]
    # a memory without keywords is grouped under "general"
    assert "### general\n- Old work" in memory_md["MEMORY.md"]


def test_task_groups_keep_their_sorted_order() -> None:
    memory = "---\nkeywords: {k}\n---\n### Task 1: {t}\n"
    sel = with_stems(
        pl.DataFrame(
            {
                "project_key": [KEY] * 3,
                "rollout_id": [A, B, "c"],
                "cwd": [None] * 3,
                "updated_at": [T, T + timedelta(days=1), T + timedelta(days=2)],
                "raw_memory": [
                    memory.format(k="zeta", t="z"),
                    memory.format(k="alpha", t="a"),
                    memory.format(k="mid", t="m"),
                ],
                "rollout_summary": ["s"] * 3,
                "rollout_slug": [None] * 3,
            }
        )
    )
    text = heuristic_consolidation(KEY, sel)["MEMORY.md"]
    assert text.index("### alpha") < text.index("### mid") < text.index("### zeta")


def test_a_more_recent_last_use_ranks_first_at_equal_counts() -> None:
    outputs = pl.DataFrame(
        {
            "project_key": ["p", "p"],
            "rollout_id": ["used-long-ago", "used-lately"],
            "updated_at": [T + timedelta(days=9), T],
            "raw_memory": ["m", "m"],
            "rollout_summary": ["s", "s"],
        }
    )
    usage = pl.DataFrame(
        {
            "rollout_id": ["used-long-ago", "used-lately"],
            "usage_count": [2, 2],
            "last_usage": [T, T + timedelta(days=5)],
        }
    )
    out = select_memories(outputs.lazy(), usage.lazy(), limit=1).collect()
    assert out["rollout_id"].to_list() == ["used-lately"]
