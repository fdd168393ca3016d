"""Phase 2's pure parts: usage from citations, ranking, stems, bullets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.citations import citation_usage
from memkiln.transforms.consolidate import (
    merge_bullets,
    render_memory_summary,
    select_memories,
    with_stems,
)
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.names import hash4, sanitize_slug, summary_stem, uuid_time
from memkiln.transforms.raw_memory import memory_bullets

T = datetime(2026, 10, 1, tzinfo=UTC)


def test_citations_in_later_answers_count_as_uses() -> None:
    items = pl.DataFrame({
        "item_type": ["message"] * 4,
        "role": ["assistant", "assistant", "user", "assistant"],
        "text": [
            "done <oai-mem-citation>\n<citation_entries>MEMORY.md:1-2</citation_entries>\n<rollout_ids>\nr-a\nr-b\n</rollout_ids>\n</oai-mem-citation>",
            "again <oai-mem-citation><thread_ids>r-a</thread_ids></oai-mem-citation>",
            "<oai-mem-citation><rollout_ids>r-c</rollout_ids></oai-mem-citation>",
            "no citation here",
        ],
        "ts": [T, T + timedelta(days=1), T, T],
    })  # fmt: skip
    usage = citation_usage(items.lazy()).collect().sort("rollout_id")
    assert usage.select("rollout_id", "usage_count").rows() == [("r-a", 2), ("r-b", 1)]
    assert usage["last_usage"][0] == T + timedelta(days=1)


def test_selection_ranks_by_usage_then_last_use_then_recency_and_caps_per_project() -> None:
    outputs = pl.DataFrame({
        "project_key": ["p"] * 4 + ["q"],
        "rollout_id": ["old-used", "new", "newer", "empty", "other"],
        "updated_at": [T, T + timedelta(days=5), T + timedelta(days=6), T + timedelta(days=9), T],
        "raw_memory": ["m", "m", "m", " ", "m"],
        "rollout_summary": ["s"] * 5,
    })  # fmt: skip
    usage = pl.DataFrame(
        {"rollout_id": ["old-used"], "usage_count": [3], "last_usage": [T + timedelta(days=7)]}
    )
    out = select_memories(outputs.lazy(), usage.lazy(), limit=2).collect()
    assert out.filter(pl.col("project_key") == "p")["rollout_id"].to_list() == ["old-used", "newer"]
    assert out.filter(pl.col("project_key") == "q")["rollout_id"].to_list() == ["other"]


def test_summary_stems_follow_codexs_rule() -> None:
    rid = "019b7286-24c7-7011-a4e8-65fdd4e19ee0"  # UUIDv7
    assert uuid_time(rid) == datetime(2025, 12, 31, 3, 49, 12, 519000, tzinfo=UTC)
    low32 = int("65fdd4e19ee0"[-8:], 16) % 62**4
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    expected = "".join(digits[(low32 // 62**k) % 62] for k in (3, 2, 1, 0))
    assert hash4(rid) == expected
    assert (
        summary_stem(rid, None, "Fix Login/../Bug!")
        == f"2025-12-31T03-49-12-{expected}-fix_login____bug"
    )
    # Codex's own fixture: the same id gives the same stem in both tools' folders.
    assert summary_stem("0194f5a6-89ab-7cde-8123-456789abcdef", T, None) == (
        "2025-02-11T15-35-19-jqmb"
    )
    # Not a UUID: the update time, and a x31 rolling hash of the characters kept to 32 bits,
    # worked by hand for "not-a-uuid" (n o t - a - u u i d = 110 111 116 45 97 45 117 117 105 100):
    # h = 110, 3521, 109267, 3387322, 105007079, 3255219494, then past 2**32 it wraps:
    # 2127556623, 1529745990, 177485539, 1207084513.
    # 1207084513 mod 62**4 (14776336) = 10201297 = 42*62**3 + 49*62**2 + 51*62 + 3
    # -> digits G, N, P, 3 in 0-9a-zA-Z, most significant first.
    assert hash4("not-a-uuid") == "GNP3"
    assert summary_stem("not-a-uuid", T, None) == "2026-10-01T00-00-00-GNP3"
    assert summary_stem("not-a-uuid", T, "Fix it") == "2026-10-01T00-00-00-GNP3-fix_it"
    assert sanitize_slug("a" * 70 + "__") == "a" * 60
    assert sanitize_slug("___") == ""


def test_near_duplicate_bullets_merge_and_keep_every_source() -> None:
    selected = with_stems(pl.DataFrame({
        "rollout_id": ["019b0000-0000-7000-8000-000000000001", "019b0000-0000-7000-8000-000000000002"],
        "updated_at": [T, T + timedelta(days=1)],
        "rollout_slug": ["a", "b"],
        "raw_memory": [
            "---\nkeywords: x\n---\n### Task 1: t\n\nPreference signals:\n- Always run the linter first.\n\nReferences:\n- rollout 1\n",
            "---\nkeywords: x\n---\n### Task 1: t\n\nPreference signals:\n- always run the LINTER first\n",
        ],
    }))  # fmt: skip
    merged = merge_bullets(memory_bullets(selected))
    assert merged.height == 1
    row = merged.row(0, named=True)
    assert row["section"] == "preferences" and row["text"] == "always run the LINTER first"
    assert len(row["sources"]) == 2


def test_memory_summary_leads_with_do_and_avoid_and_leaves_out_file_lists() -> None:
    merged = pl.DataFrame(
        {
            "section": ["preferences", *["knowledge"] * 4, "failures", "failures"],
            "text": [
                "Always run the linter first.",
                "Files changed: package.json, src/app.tsx",
                "Commands that worked: `pnpm lint`, `pnpm test`",
                "Commands that worked: `pnpm test`",
                "Fact: the API runs on port 8080",
                "`npm test` failed: npm: command not found; a later `pnpm test` succeeded",
                "`ls dist` failed: ls: dist: No such file or directory",
            ],
            "sources": [["a"], ["a"], ["a"], ["b"], ["a"], ["a"], ["a"]],
        }
    )
    tasks = pl.DataFrame(
        {"updated_at": [T], "title": ["Fix the test"], "outcome": ["success"], "stem": ["s"]}
    )
    text = render_memory_summary("github.com/acme/shop", merged, tasks, max_tokens=5_000)
    assert text.startswith(MEMORY_GUIDANCE + "\n")
    lead, index = text.split("## Do:", 1)[1].split("## Sessions in memory", 1)
    assert " the user's preferences, in their words\n\n- Always run the linter first." in lead
    assert "`npm test` failed" in lead.split("## Avoid:", 1)[1]
    # the command from two sessions first, each command once
    assert "## Commands that exited 0, checks first\n\n- `pnpm test`\n- `pnpm lint`\n" in lead
    assert "Fact: the API runs on port 8080" in lead.split("## Decisions and facts", 1)[1]
    assert "Files changed" not in lead and "Commands that worked:" not in lead
    assert "`ls dist`" not in lead  # a slip of the agent's, not a pitfall of the project
    assert "Fix the test (success)" in index
