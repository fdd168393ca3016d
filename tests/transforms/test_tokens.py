"""Token budget: counts never below the real ones, a middle cut that keeps head and tail."""

from __future__ import annotations

import random

import pytest

from memkiln.transforms import tokens
from memkiln.transforms.tokens import (
    count_tokens,
    encoding,
    stage_one_budget,
    truncate_middle,
)


def sample_text(n_lines: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = ["def", "return", "é", "日本語", "{", '"k":', "0x1f", "  ", "error:", "über", "🙂"]
    return "\n".join(
        " ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(n_lines)
    )


def test_budget_is_95_percent_of_70_percent_of_the_window_with_a_fallback() -> None:
    assert stage_one_budget(100_000) == 66_500
    assert stage_one_budget(None) == 150_000


def test_the_budget_leaves_the_window_room_for_the_rest_of_the_request_with_a_floor() -> None:
    # a large window: the share binds; a small one: what the rest of the request leaves
    assert stage_one_budget(100_000, reserved_tokens=5_000) == 66_500
    assert stage_one_budget(10_000, reserved_tokens=5_000) == 10_000 - 5_000 - 32
    assert stage_one_budget(4_000, reserved_tokens=5_000) == 1_000
    assert stage_one_budget(None, reserved_tokens=5_000) == 150_000


def test_piecewise_count_is_never_below_the_exact_count(monkeypatch: pytest.MonkeyPatch) -> None:
    text = sample_text(2_000)
    exact = len(encoding().encode_ordinary(text))
    for piece in (500, 2_000, 10_000):
        monkeypatch.setattr(tokens, "PIECE_CHARS", piece)
        assert count_tokens(text) >= exact


def test_truncation_keeps_head_and_tail_with_a_marker_and_fits_the_budget() -> None:
    text = "FIRST LINE\n" + sample_text(20_000) + "\nLAST LINE"
    out, t = truncate_middle(text, 5_000)
    assert t.truncated and t.tokens_after <= 5_000
    assert count_tokens(out) <= 5_000
    assert out.startswith("FIRST LINE") and out.endswith("LAST LINE")
    assert "tokens truncated…" in out
    out.encode("utf-8")  # no half characters: encoding would fail on a lone surrogate


def test_text_under_budget_is_returned_unchanged() -> None:
    out, t = truncate_middle("short", 10)
    assert out == "short" and not t.truncated


def test_a_text_that_fits_by_its_size_is_counted_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = sample_text(2_000, seed=5)
    exact = count_tokens(text)
    calls: list[str] = []
    counting = tokens.count_tokens

    def spy(value: str) -> int:
        calls.append(value)
        return counting(value)

    monkeypatch.setattr(tokens, "count_tokens", spy)
    out, t = truncate_middle(text, len(text.encode()))
    assert out == text and not t.truncated and calls == []
    assert (t.tokens_before, t.tokens_after, t.removed) == (exact, exact, 0)
    assert calls == [text]  # counted once, then remembered
    assert t.tokens_after == exact and calls == [text]


def test_a_text_far_over_budget_is_cut_from_its_ends_with_an_estimated_count() -> None:
    text = "HEAD\n" + sample_text(60_000, seed=3) + "\nTAIL"
    exact = count_tokens(text)
    out, t = truncate_middle(text, 2_000)
    assert count_tokens(out) <= 2_000 and t.tokens_after <= 2_000
    assert out.startswith("HEAD\n") and out.endswith("\nTAIL")
    removed = int(out.split("\n…", 1)[1].split(" tokens truncated…", 1)[0])
    assert abs(removed - (exact - t.tokens_after)) <= 0.1 * exact  # estimated, close


def test_a_long_text_of_long_tokens_that_fits_is_not_cut() -> None:
    text = ("internationalization " * 9_000).strip()  # ~190 kB, ~18k tokens
    out, t = truncate_middle(text, 20_000)
    assert out == text and not t.truncated


def test_threads_asking_for_the_encoder_at_once_load_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    import time

    import bpe_openai

    loads: list[str] = []

    def slow_load(name: str) -> object:
        loads.append(name)
        time.sleep(0.05)
        return object()

    monkeypatch.setattr(bpe_openai, "get_encoding", slow_load)
    tokens._load.cache_clear()
    try:
        got: list[object] = []
        threads = [threading.Thread(target=lambda: got.append(encoding())) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert loads == ["o200k_base"] and len(got) == 4 and len({id(g) for g in got}) == 1
    finally:
        tokens._load.cache_clear()  # the next test loads the real encoder
