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
