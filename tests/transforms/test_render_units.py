"""What a model reads of a session, on a few small items (milliseconds each): which items a
long session keeps from each end and the size it reports as left out, and the stage-one
messages ``stage_one_inputs`` builds (the session's row passed through, its path and cwd
redacted, the window, the output reserve and the left-out size all reaching the budget)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.prompts import build_stage_one_input
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.render import (
    ITEM_OVERHEAD_CHARS,
    contents_by_rollout,
    item_json_expr,
    stage_one_inputs,
)
from memkiln.transforms.tokens import encoding, stage_one_keep_chars

SCHEMA = {
    "rollout_id": pl.String,
    "seq": pl.Int64,
    "item_type": pl.String,
    "role": pl.String,
    "name": pl.String,
    "call_id": pl.String,
    "text": pl.String,
    "parts": pl.List(pl.Struct({"type": pl.String, "text": pl.String})),
}
TOKEN = "ghp_" + "Zz9Y" * 9
# Loaded when the file is imported, not in each test (or mutant run). The rules are not:
# compiling them starts Polars' thread pool, which a process forked after it cannot use
# (mutmut forks each mutant's run from a process that imported this file).
encoding()


@cache
def rules() -> RuleSet:
    return load_rules()


def output(rid: str, seq: int, text: str | None) -> dict[str, object]:
    return {"rollout_id": rid, "seq": seq, "item_type": "function_call_output", "role": None,
            "name": None, "call_id": f"c{seq}", "text": text, "parts": None}  # fmt: skip


def frame(rows: list[dict[str, object]]) -> pl.LazyFrame:
    return pl.DataFrame(rows, schema=SCHEMA).lazy()


def sized(rid: str, n: int, size: int = 100) -> list[dict[str, object]]:
    """``n`` items of ``size`` characters each, as ``contents_by_rollout`` counts them."""
    return [output(rid, seq, f"{seq}".ljust(size - ITEM_OVERHEAD_CHARS, "x")) for seq in range(n)]


def kept(rows: list[dict[str, object]], keep_chars: int | None) -> dict[str, tuple[list[int], int]]:
    """rollout -> (the seqs rendered, in order; the size reported as left out)."""
    out = contents_by_rollout(frame(rows), rules=rules(), keep_chars=keep_chars).collect()
    assert out.schema["omitted_chars"] == pl.Int64
    got = {}
    for rid, contents, omitted in out.select("rollout_id", "contents", "omitted_chars").rows():
        seqs = [int(json.loads(line)["output"].rstrip("x")) for line in contents.split("\n")]
        got[rid] = (seqs, omitted)
    return got


def test_an_item_is_counted_as_its_text_and_64_characters_of_json() -> None:
    assert ITEM_OVERHEAD_CHARS == 64
    assert len(sized("r", 1)[0]["text"]) == 36  # type: ignore[arg-type]


def test_a_session_within_four_times_the_kept_size_is_rendered_whole() -> None:
    assert kept(sized("r", 4), 100) == {"r": ([0, 1, 2, 3], 0)}
    assert kept(sized("r", 4, 101), 101) == {"r": ([0, 1, 2, 3], 0)}


def test_a_longer_session_keeps_the_items_starting_within_the_kept_size_of_each_end() -> None:
    # five items of 100: 100 before the second one, 100 after the fourth: neither is kept
    assert kept(sized("r", 5), 100) == {"r": ([0, 4], 300)}
    assert kept(sized("r", 5), 101) == {"r": ([0, 1, 3, 4], 100)}
    assert kept(sized("r", 9), 201) == {"r": ([0, 1, 2, 6, 7, 8], 300)}


def test_an_item_without_text_counts_its_json_only() -> None:
    rows = [output("r", 0, None), *sized("r", 5)[1:]]  # 64 + 4 x 100 = 464 > 4 x 100
    got = contents_by_rollout(frame(rows), rules=rules(), keep_chars=100).collect()
    lines = got["contents"][0].split("\n")
    assert json.loads(lines[0]) == {"type": "function_call_output", "call_id": "c0", "output": None}
    # before the second item: 64 < 100, so it is kept; after the fourth: 100, not kept
    assert len(lines) == 3 and got["omitted_chars"][0] == 200
    rows = [output("r", 0, None), *sized("r", 4)[1:]]  # 364 <= 4 x 91: whole
    got = contents_by_rollout(frame(rows), rules=rules(), keep_chars=91).collect()
    assert got["contents"][0].count("\n") == 3 and got["omitted_chars"][0] == 0


def test_each_session_is_cut_on_its_own_in_seq_order() -> None:
    rows = sized("long", 5) + sized("short", 2, 300)
    rows = rows[::-1]  # stored out of order
    assert kept(rows, 100) == {"long": ([0, 4], 300), "short": ([0, 1], 0)}
    assert kept(rows, None) == {"long": ([0, 1, 2, 3, 4], 0), "short": ([0, 1], 0)}


def test_the_items_json_is_shaped_by_its_type() -> None:
    rows = [
        {**output("r", 0, "{}"), "item_type": "function_call", "name": "shell"},
        {**output("r", 1, "patch"), "item_type": "custom_tool_call", "name": "apply_patch"},
        {**output("r", 2, "out"), "item_type": "custom_tool_call_output"},
        {**output("r", 3, "hit"), "item_type": "tool_search_output"},
        {**output("r", 4, "q"), "item_type": "web_search_call"},
        {**output("r", 5, "x"), "item_type": "message", "role": "assistant",
         "parts": [{"type": "output_text", "text": "done"}]},
    ]  # fmt: skip
    got = (
        pl.DataFrame(rows, schema=SCHEMA)
        .with_columns(provenance=pl.lit(None, dtype=pl.String))
        .select(item_json_expr())
    )
    assert [json.loads(v) for v in got.to_series()] == [
        {"type": "function_call", "name": "shell", "call_id": "c0", "arguments": "{}"},
        {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c1", "input": "patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "out"},
        {"type": "tool_search_output", "call_id": "c3", "output": "hit"},
        {"type": "web_search_call", "call_id": "c4", "action": "q"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "done"}]},
    ]  # fmt: skip


# -- the stage-one messages ---------------------------------------------------------------


def sessions(*rows: tuple[str, str, str | None]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"rollout_id": r, "path": p, "cwd": c, "project_key": f"p-{r}"} for r, p, c in rows],
        schema={"rollout_id": pl.String, "path": pl.String, "cwd": pl.String,
                "project_key": pl.String},
    )  # fmt: skip


def built(
    table: pl.DataFrame, rows: list[dict[str, object]], **kw: Any
) -> dict[str, tuple[dict[str, Any], Any]]:
    args: dict[str, Any] = {"context_window": None, "max_output_tokens": 4_000} | kw
    got = stage_one_inputs(table, frame(rows), rules=rules(), **args)
    return {row["rollout_id"]: (row, message) for row, message in got}


def test_each_session_row_is_passed_through_with_its_path_and_cwd_redacted() -> None:
    table = sessions(
        ("a", f"/home/dev/{TOKEN}/rollout-a.jsonl", f"/srv/{TOKEN}"),
        ("b", "/home/dev/rollout-b.jsonl", None),
    )
    got = built(table, sized("a", 2))
    row, message = got["a"]
    assert row == {
        "rollout_id": "a",
        "path": "/home/dev/[REDACTED_SECRET]/rollout-a.jsonl",
        "cwd": "/srv/[REDACTED_SECRET]",
        "project_key": "p-a",
    }
    assert TOKEN not in message.user and TOKEN not in message.system
    assert "rollout_path: /home/dev/[REDACTED_SECRET]/rollout-a.jsonl" in message.user
    assert "rollout_cwd: /srv/[REDACTED_SECRET]" in message.user
    expected = build_stage_one_input(
        rollout_path=row["path"],
        rollout_cwd=row["cwd"],
        rollout_contents=contents_by_rollout(frame(sized("a", 2)), rules=rules()).collect()[
            "contents"
        ][0],
        context_window=None,
        max_output_tokens=4_000,
    )
    assert (message.system, message.user) == (expected.system, expected.user)
    # a session without kept items: the messages with empty contents
    row, message = got["b"]
    assert row == {"rollout_id": "b", "path": "/home/dev/rollout-b.jsonl", "cwd": None,
                   "project_key": "p-b"}  # fmt: skip
    assert "rollout_cwd: unknown" in message.user
    empty = build_stage_one_input(
        rollout_path=row["path"], rollout_cwd=None, rollout_contents="", context_window=None
    )
    assert message.user == empty.user and not message.truncation.truncated
    assert list(got) == ["a", "b"]


def test_the_window_and_the_output_reserve_set_the_budget() -> None:
    table = sessions(("a", "/r/a.jsonl", "/r"))
    rows = sized("a", 3)
    assert built(table, rows)["a"][1].truncation.budget == 150_000
    assert built(table, rows, context_window=100_000)["a"][1].truncation.budget == 66_500
    small = built(table, rows, context_window=8_000, max_output_tokens=4_000)["a"][1]
    smaller = built(table, rows, context_window=8_000, max_output_tokens=5_000)["a"][1]
    assert small.truncation.budget - smaller.truncation.budget == 1_000


@pytest.mark.parametrize("window", [1_500, 3_000])
def test_a_long_session_is_cut_to_the_windows_keep_size_and_the_marker_counts_the_rest(
    window: int,
) -> None:
    keep = stage_one_keep_chars(window)
    n = 4 * keep // 100 + 50
    table = sessions(("a", "/r/a.jsonl", "/r"))
    _, message = built(table, sized("a", n), context_window=window)["a"]
    contents = contents_by_rollout(frame(sized("a", n)), rules=rules(), keep_chars=keep).collect()
    omitted = contents["omitted_chars"][0]
    assert omitted == (n - 2 * -(-keep // 100)) * 100 > 0  # items that start within keep
    expected = build_stage_one_input(
        rollout_path="/r/a.jsonl",
        rollout_cwd="/r",
        rollout_contents=contents["contents"][0],
        context_window=window,
        max_output_tokens=4_000,
        omitted_chars=omitted,
    )
    assert message.user == expected.user
    assert message.truncation.tokens_before == expected.truncation.tokens_before
    assert (
        message.truncation.truncated
        and message.truncation.tokens_after <= message.truncation.budget
    )
