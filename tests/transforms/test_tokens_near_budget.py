"""A text whose token count is within the marker's cost of the budget, but whose byte size is
over it, fits: ``truncate_middle`` must keep it whole and report its real count (it used to
cut it, estimating 613 tokens for a 600-token text)."""

from __future__ import annotations

import pytest

from memkiln.transforms.tokens import count_tokens, truncate_middle


@pytest.mark.parametrize("spare", [0, 2, 10])
def test_a_text_that_fits_the_budget_in_tokens_is_never_cut(spare: int) -> None:
    text = " ".join(f"w{i}" for i in range(300))  # 600 tokens, 1,389 bytes
    total = count_tokens(text)
    out, t = truncate_middle(text, total + spare)
    assert out == text
    assert not t.truncated
    assert t.tokens_before == total


@pytest.mark.parametrize("over", [1, 5, 40])
def test_a_text_just_over_the_budget_is_cut_to_fit_with_its_real_count(over: int) -> None:
    text = " ".join(f"w{i}" for i in range(300))
    total = count_tokens(text)
    out, t = truncate_middle(text, total - over)
    assert t.truncated
    assert t.tokens_before == total
    assert count_tokens(out) <= total - over
    assert out.startswith("w0 w1") and out.endswith("w298 w299")


@pytest.mark.parametrize("share", [0.9, 0.97])
def test_a_long_text_near_the_budget_is_cut_to_fit_counted_piecewise(share: float) -> None:
    # Above 64k characters the count is piecewise (one token added per join), so the two
    # ends cut from the token ids count a little more once encoded again: up to 35 tokens over the
    # budget before the exact cut was repeated until the whole fitted (3 corpus sessions
    # rendered 4 tokens over their 180,880-token budget).
    words = ["alpha", "beta", "gamma", "delta", "kiln", "memory", "session"]
    lines = [" ".join(words[(i * 7 + j) % 7] for j in range(3 + i % 9)) for i in range(60_000)]
    text = "\n".join(lines) + "\n"
    total = count_tokens(text)
    budget = int(total * share)
    out, t = truncate_middle(text, budget)
    assert t.truncated
    assert count_tokens(out) == t.tokens_after <= budget
    assert out.startswith(lines[0]) and out.endswith(lines[-1] + "\n")
