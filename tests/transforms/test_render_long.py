"""A session far longer than its token budget keeps only the items near its two ends before
it is rendered (a 200 MB session rendered whole peaked over 2 GB): the input the model reads
keeps the same head and tail as a whole rendering, and the marker still counts what was left
out."""

from __future__ import annotations

import random
import re

import polars as pl
import pytest

import memkiln.transforms.render as render
from memkiln.io.rules import load_rules
from memkiln.transforms.prompts import build_stage_one_input
from memkiln.transforms.render import ITEM_OVERHEAD_CHARS, contents_by_rollout, render_items
from memkiln.transforms.tokens import stage_one_keep_chars

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
WORDS = ["build", "test", "kiln", "memory", "session", "error", "fixed", "the", "a", "of"]


def outputs(rid: str, n: int, chars: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for seq in range(n):
        text = f"#{seq} " + " ".join(rng.choices(WORDS, k=chars // 5))
        rows.append({"rollout_id": rid, "seq": seq, "item_type": "function_call_output",
                     "role": None, "name": None, "call_id": f"c{seq}", "text": text,
                     "parts": None})  # fmt: skip
    return rows


def test_only_the_items_near_each_end_of_a_long_session_are_rendered() -> None:
    rows = outputs("long", 1_000, 1_000) + outputs("short", 5, 1_000)
    frame = pl.DataFrame(rows, schema=SCHEMA).lazy()
    got = {
        r["rollout_id"]: r
        for r in contents_by_rollout(frame, rules=load_rules(), keep_chars=20_000)
        .collect()
        .iter_rows(named=True)
    }
    long_lines = got["long"]["contents"].split("\n")
    seqs = [int(re.search(r'"output":"#(\d+) ', line).group(1)) for line in long_lines]  # type: ignore[union-attr]
    sizes = [len(str(r["text"])) + ITEM_OVERHEAD_CHARS for r in rows[:1_000]]
    # items that start within 20,000 characters of either end
    expected = [
        seq for seq in range(1_000) if sum(sizes[:seq]) < 20_000 or sum(sizes[seq + 1 :]) < 20_000
    ]
    assert 20 < len(expected) < 60
    assert seqs == expected
    assert got["long"]["omitted_chars"] == sum(
        size for seq, size in enumerate(sizes) if seq not in expected
    )
    # a session within four times the kept size is rendered whole
    assert got["short"]["contents"].count("\n") == 4
    assert got["short"]["omitted_chars"] == 0


def test_the_model_reads_the_same_ends_and_a_close_count_of_the_middle() -> None:
    window = 1_500  # the smallest budget: 1,000 tokens, 16,000 characters kept per end
    keep = stage_one_keep_chars(window)
    n = 4 * keep // 500 + 400  # over four times the kept size on each end
    frame = pl.DataFrame(outputs("s", n, 500), schema=SCHEMA).lazy()
    rules = load_rules()
    whole = contents_by_rollout(frame, rules=rules).collect().row(0, named=True)
    cut = contents_by_rollout(frame, rules=rules, keep_chars=keep).collect().row(0, named=True)
    assert cut["omitted_chars"] > 0
    assert len(cut["contents"]) < len(whole["contents"]) / 2

    def prompt(row: dict[str, object]) -> tuple[str, int, int]:
        built = build_stage_one_input(
            rollout_path="/a/rollout.jsonl",
            rollout_cwd="/a",
            rollout_contents=str(row["contents"]),
            context_window=window,
            omitted_chars=int(row["omitted_chars"]),  # type: ignore[call-overload]
        )
        return built.user, built.truncation.tokens_before, built.truncation.tokens_after

    whole_user, whole_before, whole_after = prompt(whole)
    cut_user, cut_before, cut_after = prompt(cut)
    head_w, _, tail_w = whole_user.partition(" tokens truncated…\n")
    head_c, _, tail_c = cut_user.partition(" tokens truncated…\n")
    assert tail_c == tail_w
    assert head_c.rsplit("\n…", 1)[0] == head_w.rsplit("\n…", 1)[0]
    assert cut_after == whole_after
    # the count of what was left out is an estimate either way: within 5% of each other
    assert abs(cut_before - whole_before) <= 0.05 * whole_before


def test_a_chunked_sessions_items_rendered_in_slices_are_the_ones_rendered_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunked session's items are rendered and redacted a slice at a time (a 60 MiB session
    redacted whole took about three times its size on top of it): the same texts, in order."""
    rows = outputs("s", 200, 300)
    rows[37]["text"] = "export OPENAI_API_KEY=sk-proj-" + "Ab3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY" * 2
    frame = pl.DataFrame(rows, schema=SCHEMA).with_columns(provenance=pl.lit(None, pl.String))
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=3)
    rules = load_rules()
    whole = render_items(frame.lazy(), rules=rules).select("seq", "item_json").collect()
    monkeypatch.setattr(render, "RENDER_SLICE_CHARS", 1_000)  # about three items a slice
    for items in (frame, shuffled):
        sliced = render.rendered_in_slices(items, rules=rules)
        assert sliced.equals(whole)
    assert (
        "sk-proj-" not in sliced["item_json"][37] and "[REDACTED_SECRET]" in sliced["item_json"][37]
    )
    assert render.rendered_in_slices(frame.clear(), rules=rules).height == 0
