"""Token counts and the middle cut, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): where
long texts are cut into pieces, the exact marker, the counts a Truncation reports, and the
near-budget path that cuts a short text's token ids."""

from __future__ import annotations

import pytest

from memkiln.transforms import tokens
from memkiln.transforms.tokens import (
    Truncation,
    count_tokens,
    encode,
    encoding,
    marker,
    truncate_middle,
)
from tests.transforms.test_tokens import sample_text


def exact(text: str) -> int:
    return len(encoding().encode_ordinary(text))


def test_a_text_below_one_piece_is_counted_exactly() -> None:
    text = sample_text(300)
    assert len(text) < tokens.PIECE_CHARS
    assert count_tokens(text) == exact(text)
    assert count_tokens("") == 0


def test_pieces_are_cut_after_a_line_end_in_their_second_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 1_000)
    text = sample_text(400, seed=11)
    pieces = list(tokens._pieces(text))
    assert "".join(pieces) == text and len(pieces) > 3
    for piece in pieces[:-1]:
        assert piece.endswith("\n")
        assert 500 < len(piece) <= 1_000
    tail = list(tokens._tail_pieces(text))
    assert "".join(reversed(tail)) == text and len(tail) > 3
    for piece in tail[:-1]:
        assert 500 <= len(piece) <= 1_000
        assert text[len(text) - sum(map(len, tail[: tail.index(piece) + 1])) - 1] == "\n"


def test_a_text_without_line_ends_is_cut_at_the_piece_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 1_000)
    text = "x" * 2_500
    assert [len(p) for p in tokens._pieces(text)] == [1_000, 1_000, 500]
    assert [len(p) for p in tokens._tail_pieces(text)] == [1_000, 1_000, 500]


def test_each_cut_is_charged_one_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 1_000)
    text = sample_text(400, seed=11)
    pieces = list(tokens._pieces(text))
    assert count_tokens(text) == sum(exact(p) for p in pieces) + len(pieces) - 1


def test_encoding_in_pieces_decodes_back_to_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 1_000)
    text = sample_text(400, seed=12)
    assert encoding().decode_bytes(encode(text)).decode("utf-8") == text


def test_the_marker_says_how_many_tokens_were_cut_on_its_own_line() -> None:
    assert marker(1234) == "\n…1234 tokens truncated…\n"


def test_a_text_of_exactly_budget_bytes_is_kept_whole() -> None:
    out, t = truncate_middle("abcdefghij", 10)
    assert out == "abcdefghij" and not t.truncated


def test_a_truncation_reports_what_it_did() -> None:
    t = Truncation(100, before=250, after=90)
    assert t.truncated and t.removed == 160
    assert repr(t) == "Truncation(budget=100, tokens_before=250, tokens_after=90)"
    kept = Truncation.kept_whole("hello world", 100)
    assert repr(kept) == "Truncation(budget=100, kept whole, not counted)"
    assert not kept.truncated and kept.removed == 0
    assert kept.tokens_after == 2
    assert repr(kept) == "Truncation(budget=100, tokens_before=2, tokens_after=2)"
    assert not Truncation(100, before=100, after=100).truncated
    assert Truncation(100, before=101, after=95).truncated
    assert Truncation(10, before=5, after=9).removed == 0
    with pytest.raises(ValueError, match="needs both counts"):
        Truncation(100, before=5)
    with pytest.raises(ValueError, match="needs both counts"):
        Truncation(100, after=5)


def test_a_cut_near_the_start_or_the_end_still_falls_after_a_line_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 1_000)
    text = "a" * 300 + "\n" + "b" * 700  # 1,001 characters
    assert list(tokens._tail_pieces(text)) == ["b" * 700, "a" * 300 + "\n"]
    text = "a" * 700 + "\n" + "b" * 300
    assert list(tokens._pieces(text)) == ["a" * 700 + "\n", "b" * 300]
    text = "a" * 999 + "\n" + "b"
    assert list(tokens._pieces(text)) == ["a" * 999 + "\n", "b"]
    assert list(tokens._tail_pieces("b" + "\n" + "a" * 999)) == ["a" * 999, "b\n"]
