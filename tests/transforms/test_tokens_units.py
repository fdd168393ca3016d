"""The token budget and the middle cut on small texts (milliseconds each): the budget a
window gives, the marker and the count it shows, what is kept from each end, and the counts
a Truncation reports. ``PIECE_CHARS`` is made small so that texts of a few kilobytes take
the paths of the long ones (cut into pieces, cut far over the budget)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from memkiln.transforms import tokens
from memkiln.transforms.tokens import (
    FALLBACK_BUDGET_TOKENS,
    KEEP_CHARS_PER_TOKEN,
    count_tokens,
    encode,
    encoding,
    marker,
    stage_one_budget,
    stage_one_keep_chars,
    truncate_middle,
)

# Loaded when the file is imported, so that each test (and each mutant run) does not pay it.
ENC = encoding()
LINES = "".join(f"line {i:04d} alpha beta\n" for i in range(400))  # 8,400 ASCII characters


def exact(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def shown(out: str) -> int:
    """The count the marker in ``out`` shows."""
    found = re.findall(r"\n…(\d+) tokens truncated…\n", out)
    assert len(found) == 1, out
    return int(found[0])


def ends(out: str) -> tuple[str, str]:
    head, _, rest = out.partition("\n…")
    return head, rest.partition(" tokens truncated…\n")[2]


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 200)
    yield


# -- the budget ---------------------------------------------------------------------------


def test_the_budget_is_the_share_of_the_window_rounded_down() -> None:
    assert stage_one_budget(10_001) == 6_650  # 10,001 x 0.665 = 6,650.665
    assert stage_one_budget(200_000) == 133_000
    assert stage_one_budget(0) == FALLBACK_BUDGET_TOKENS == 150_000
    assert stage_one_budget(0, reserved_tokens=10**9) == 150_000


def test_the_budget_is_what_the_window_leaves_when_that_is_less_than_the_share() -> None:
    assert stage_one_budget(10_000, reserved_tokens=3_000) == 6_650  # room 6,968: the share
    assert stage_one_budget(10_000, reserved_tokens=4_000) == 5_968  # room binds
    assert stage_one_budget(10_000, reserved_tokens=3_318) == 6_650  # room 6,650: equal
    assert stage_one_budget(1_000_000, reserved_tokens=990_000) == 10_000 - 32


def test_the_budget_never_falls_below_the_floor() -> None:
    assert stage_one_budget(1_200) == 1_000  # share 798
    assert stage_one_budget(1_504) == 1_000  # share 1,000.16: the same
    assert stage_one_budget(1_600) == 1_064
    assert stage_one_budget(10_000, reserved_tokens=9_500) == 1_000
    assert stage_one_budget(10_000, reserved_tokens=8_967) == 1_001


def test_each_end_of_a_session_keeps_sixteen_characters_per_budget_token() -> None:
    assert KEEP_CHARS_PER_TOKEN == 16
    assert stage_one_keep_chars(None) == 150_000 * 16
    assert stage_one_keep_chars(100_000) == 66_500 * 16
    assert stage_one_keep_chars(1_000) == 1_000 * 16


# -- counting -----------------------------------------------------------------------------


def test_a_text_is_counted_exactly_within_one_piece_and_one_more_per_cut(
    small_pieces: None,
) -> None:
    assert count_tokens("") == 0
    assert count_tokens("hello world") == exact("hello world") == 2
    pieces = list(tokens._pieces(LINES))
    assert len(pieces) == 45 and "".join(pieces) == LINES
    assert count_tokens(LINES) == sum(exact(p) for p in pieces) + 44
    assert encode(LINES) == [i for p in pieces for i in ENC.encode_ordinary(p)]
    assert ENC.decode_bytes(encode(LINES)).decode() == LINES
    assert encode("") == []


def test_pieces_end_at_the_last_line_end_of_their_second_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 10)
    text = "abcdef\nghijklmnop\nqr"
    assert list(tokens._pieces(text)) == ["abcdef\n", "ghijklmnop", "\nqr"]
    # a line end in the first half is not used: the piece would be too small
    assert list(tokens._pieces("ab\ncdefghijklm")) == ["ab\ncdefghi", "jklm"]
    # the second half starts at 5 characters in
    assert list(tokens._pieces("abcd\nefghijkl")) == ["abcd\nefghi", "jkl"]
    assert list(tokens._pieces("abcde\nfghijkl")) == ["abcde\n", "fghijkl"]
    assert list(tokens._pieces("a" * 10)) == ["a" * 10]
    # the last piece is never cut again: a text within one piece is one piece
    assert list(tokens._pieces("abcdef\nghi")) == ["abcdef\nghi"]
    assert list(tokens._pieces("")) == []


def test_tail_pieces_start_after_the_first_line_end_of_their_first_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 10)
    text = "qr\nponmlkjihg\nfedcba"
    assert list(tokens._tail_pieces(text)) == ["fedcba", "onmlkjihg\n", "qr\np"]
    assert list(tokens._tail_pieces("mlkjihgfedc\nba")) == ["ihgfedc\nba", "mlkj"]
    # the window is [end - 10, end - 5): a line end at end - 5 is not used
    assert list(tokens._tail_pieces("xxxxxxxxx\nabcd")) == ["xxxxx\nabcd", "xxxx"]
    assert list(tokens._tail_pieces("xxxxxxxx\nabcde")) == ["abcde", "xxxxxxxx\n"]
    assert list(tokens._tail_pieces("xxxxx\nabcdef")) == ["abcdef", "xxxxx\n"]
    assert list(tokens._tail_pieces("a" * 10)) == ["a" * 10]
    assert list(tokens._tail_pieces("xabcdefghij")) == ["abcdefghij", "x"]
    assert list(tokens._tail_pieces("x")) == ["x"]
    assert list(tokens._tail_pieces("")) == []


# -- taking tokens from one end -----------------------------------------------------------


def test_take_keeps_whole_pieces_and_charges_each_join_one_token() -> None:
    pieces = ["alpha beta\n", "gamma delta\n", "kiln memory\n"]
    sizes = [exact(p) for p in pieces]
    whole = sum(sizes) + 2
    assert tokens._take(iter(pieces), whole, from_end=False) == ("".join(pieces), whole, 35)
    assert tokens._take(iter(pieces), 100, from_end=False) == ("".join(pieces), whole, 35)
    two = sizes[0] + sizes[1] + 1
    assert tokens._take(iter(pieces), two, from_end=False) == ("".join(pieces[:2]), two, 23)
    assert tokens._take(iter(pieces), sizes[0], from_end=False) == (pieces[0], sizes[0], 11)
    assert tokens._take(iter(pieces), 0, from_end=False) == ("", 0, 0)
    assert tokens._take(iter([]), 10, from_end=False) == ("", 0, 0)


def test_take_cuts_the_piece_where_the_budget_ends_at_a_token() -> None:
    pieces = ["alpha beta gamma\n", "one two three four\n"]
    first = exact(pieces[0])  # 4
    # the whole first piece, a join, and the first two tokens of the second
    got = tokens._take(iter(pieces), first + 3, from_end=False)
    assert got == (pieces[0] + "one two", first + 3, len(pieces[0]) + 7)
    # from the end: the pieces come last first, and the part kept is the piece's end
    back = list(reversed(pieces))
    got = tokens._take(iter(back), exact(back[0]) + 3, from_end=True)
    assert got == (" gamma\n" + back[0], exact(back[0]) + 3, len(back[0]) + 7)
    # only part of the first piece
    assert tokens._take(iter(pieces), 2, from_end=False) == ("alpha beta", 2, 10)
    assert tokens._take(iter(pieces), 2, from_end=True) == (" gamma\n", 2, 7)
    # nothing of the next piece fits beside the join: nothing more is taken
    got = tokens._take(iter([*pieces, "x\n"]), first + 1, from_end=False)
    assert got == (pieces[0], first, len(pieces[0]))


def test_take_never_keeps_half_a_character() -> None:
    text = "日本語のテキスト🙂🙂🙂𓀀𓀁𓀂"  # a hieroglyph is four tokens of one byte each
    ids = ENC.encode_ordinary(text)
    for n in range(1, len(ids)):
        head, used, chars = tokens._take(iter([text]), n, from_end=False)
        assert text.startswith(head) and chars == len(head) and used == n
        tail, used, chars = tokens._take(iter([text]), n, from_end=True)
        assert text.endswith(tail) and chars == len(tail) and used == (n if tail else 0)
        assert "\ufffd" not in head + tail


# -- the middle cut -----------------------------------------------------------------------


def test_a_text_that_fits_by_its_size_is_kept_whole_and_counted_on_request() -> None:
    out, t = truncate_middle("hello world", 11)
    assert out == "hello world"
    assert not t.truncated and t.budget == 11
    assert (t.tokens_before, t.tokens_after, t.removed) == (2, 2, 0)
    out, t = truncate_middle("", 0)
    assert out == "" and not t.truncated and t.tokens_after == 0 and t.tokens_before == 0


def test_a_text_over_its_size_but_within_the_budget_in_tokens_is_kept_whole() -> None:
    text = "alpha beta gamma " * 20  # 340 bytes, 60 tokens
    total = exact(text)
    out, t = truncate_middle(text, total)
    assert out == text
    assert (t.truncated, t.tokens_before, t.tokens_after, t.removed) == (False, total, total, 0)


def test_a_text_far_over_the_budget_keeps_equal_shares_of_its_two_ends(
    small_pieces: None,
) -> None:
    out, t = truncate_middle(LINES, 300)
    head, tail = ends(out)
    assert LINES.startswith(head) and LINES.endswith(tail)
    assert head.startswith("line 0000 alpha beta\n") and tail.endswith("line 0399 alpha beta\n")
    # the marker takes 12 tokens, with its joins; the rest is shared 144 / 144
    assert tokens._take(tokens._pieces(LINES), 144, from_end=False)[0] == head
    assert tokens._take(tokens._tail_pieces(LINES), 144, from_end=True)[0] == tail
    assert t.truncated and t.budget == 300 and t.tokens_after == 300
    assert count_tokens(out) <= 300
    # the count left out is estimated at the kept text's characters per token
    middle = len(LINES) - len(head) - len(tail)
    assert shown(out) == round(middle * 288 / (len(head) + len(tail)))
    assert t.tokens_before == 300 + shown(out) and t.removed == shown(out)
    assert abs(shown(out) - exact(LINES[len(head) : len(LINES) - len(tail)])) < 100


def test_an_odd_share_gives_the_extra_token_to_the_tail(small_pieces: None) -> None:
    out, t = truncate_middle(LINES, 301)
    head, tail = ends(out)
    assert tokens._take(tokens._pieces(LINES), 144, from_end=False)[0] == head
    assert tokens._take(tokens._tail_pieces(LINES), 145, from_end=True)[0] == tail
    assert tokens._take(tokens._tail_pieces(LINES), 144, from_end=True)[0] != tail
    assert t.tokens_after == 301


def test_a_text_just_over_the_budget_is_cut_exactly_with_its_real_count() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    ids = ENC.encode_ordinary(text)
    total = len(ids)
    out, t = truncate_middle(text, total - 1)
    keep = total - 1 - 12
    head = ENC.decode_bytes(ids[: keep // 2]).decode()
    tail = ENC.decode_bytes(ids[total - (keep - keep // 2) :]).decode()
    assert out == head + marker(total - keep) + tail
    assert shown(out) == total - keep
    assert t.truncated and t.tokens_before == total
    assert t.tokens_after == count_tokens(out) <= total - 1
    assert t.removed == total - count_tokens(out)


def test_a_cut_counted_piecewise_is_cut_again_until_it_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 40)
    text = "".join(f"kiln memory {i}\n" for i in range(120))
    total = count_tokens(text)
    assert total > exact(text) + 50  # each cut costs a token
    for budget in (total - 3, total - 40):
        out, t = truncate_middle(text, budget)
        assert t.truncated and t.tokens_before == total
        assert t.tokens_after == count_tokens(out) <= budget
        assert t.tokens_after >= budget - 15
        head, tail = ends(out)
        assert text.startswith(head) and text.endswith(tail)
        assert head.startswith("kiln memory 0\n") and tail.endswith("kiln memory 119\n")


def test_a_budget_below_the_markers_cost_keeps_only_the_marker() -> None:
    text = "word " * 50
    total = exact(text)
    out, t = truncate_middle(text, 5)
    assert out == marker(total)
    assert t.truncated and t.tokens_before == total and t.tokens_after == count_tokens(out)


# -- a text whose middle was left out before it was rendered ------------------------------


def test_the_marker_counts_the_characters_left_out_before_rendering(small_pieces: None) -> None:
    far, t = truncate_middle(LINES, 300, omitted_chars=4_200)
    head, tail = ends(far)
    assert LINES.startswith(head) and LINES.endswith(tail)
    assert t.truncated and t.tokens_after == 300 and count_tokens(far) <= 300
    middle = len(LINES) - len(head) - len(tail) + 4_200
    assert shown(far) == round(middle * 288 / (len(head) + len(tail)))
    assert t.tokens_before == 300 + shown(far)
    # the same text without anything left out shows about 1,400 tokens fewer
    _, plain = truncate_middle(LINES, 300)
    assert 1_200 < t.tokens_before - plain.tokens_before < 1_600


def test_a_short_text_with_its_middle_left_out_is_kept_whole_before_the_marker() -> None:
    text = "head of the session\ntail of the session\n"
    out, t = truncate_middle(text, 1_000, omitted_chars=5_000)
    # the two ends met: the text once, not its tail twice
    assert out == text + marker(shown(out))
    assert t.truncated and count_tokens(out) <= t.tokens_after <= 1_000
    assert t.tokens_before == t.tokens_after + shown(out)
    assert 1_000 <= shown(out) <= 2_500  # 5,000 characters at 4 to 2 characters per token


def test_a_text_with_its_middle_left_out_always_shows_the_marker() -> None:
    out, t = truncate_middle("hi", 1_000, omitted_chars=1)
    assert out == "hi" + marker(1)
    assert t.removed == 1 and t.tokens_after >= count_tokens(out)


def test_a_cut_near_the_budget_never_keeps_half_a_character() -> None:
    text = "𓀀𓀁𓀂𓀃" * 30  # 480 tokens of one byte each, four to a character
    out, t = truncate_middle(text, 470)
    head, tail = ends(out)
    assert (len(head), len(tail)) == (57, 57)  # 229 tokens from each end: 57 characters
    assert text.startswith(head) and text.endswith(tail) and "\ufffd" not in out
    assert shown(out) == 480 - 2 * 229
    assert t.tokens_before == 480 and t.tokens_after == count_tokens(out) <= 470


@pytest.mark.parametrize(
    ("lines", "budget", "estimated"),
    [
        (48, 305, False),  # estimated to lose 48 tokens: four times the marker's 12
        (48, 300, True),  # 53
        (156, 1_000, False),  # 120: not over an eighth of the budget (125)
        (157, 1_000, True),  # 128
    ],
)
def test_a_text_estimated_to_lose_little_is_counted_whole_before_it_is_cut(
    small_pieces: None, lines: int, budget: int, estimated: bool
) -> None:
    text = LINES[: 21 * lines]
    total = count_tokens(text)
    out, t = truncate_middle(text, budget)
    assert t.truncated and count_tokens(out) <= t.tokens_after <= budget
    if estimated:
        assert t.tokens_after == budget and t.tokens_before != total
    else:
        assert t.tokens_before == total and t.tokens_after == count_tokens(out)


def test_a_cut_that_fills_the_budget_exactly_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 20)
    text = " ".join(f"w{i}" for i in range(100))
    out, t = truncate_middle(text, 190)
    assert t.tokens_before == count_tokens(text) and t.tokens_after == count_tokens(out) == 190
    assert out.startswith("w0 w1 ") and out.endswith(" w98 w99")


def test_a_budget_the_marker_alone_overflows_once_counted_keeps_only_the_marker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "PIECE_CHARS", 2)  # a token charged for every 2 characters
    text = " ".join(f"w{i}" for i in range(10))
    out, t = truncate_middle(text, 20)
    assert out == marker(24)
    assert t.tokens_before == count_tokens(text) and t.tokens_after == count_tokens(out) > 20


def test_the_rate_of_a_one_character_end_is_one_token_per_character() -> None:
    text = "alpha beta gamma delta " * 5 + "alpha;"  # the last token: ";"
    out, t = truncate_middle(text, 13)  # 1 token kept: the marker takes 12
    assert out == marker(len(text) - 1) + ";"
    assert t.tokens_after == 13 and t.tokens_before == 13 + len(text) - 1
    out, t = truncate_middle(text, 13, omitted_chars=1_000)
    assert out == marker(len(text) - 1 + 1_000) + ";"
    out, t = truncate_middle(text, 5, omitted_chars=1_000)
    assert out == marker(1)  # nothing kept: no rate to estimate with


def test_a_truncation_without_its_counts_says_what_it_needs() -> None:
    message = "^a Truncation needs both counts, or the whole text to count$"
    with pytest.raises(ValueError, match=message):
        tokens.Truncation(100, before=5)
