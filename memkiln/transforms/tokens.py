"""Token counts and the stage-one budget, with OpenAI's ``o200k_base`` encoding (offline).

The encoder refuses very long inputs, so text is encoded in pieces cut at line ends. A cut
can only lose merges across it, never add them, and each cut is also charged one extra
token, so the count is never lower than the real one: a request built to the budget cannot
overflow the model's window.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from functools import cache, cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bpe_openai import Encoding

#: Share of the context window stage one may fill with rollout contents (Codex's 95% x 70%).
WINDOW_USABLE = 0.95
WINDOW_INPUT_SHARE = 0.70
#: Budget when the model's window is unknown.
FALLBACK_BUDGET_TOKENS = 150_000
#: Characters encoded at once (the encoder rejects inputs far below a megabyte).
PIECE_CHARS = 64_000

ENCODING = "o200k_base"


_loading = threading.Lock()


@cache
def _load() -> Encoding:
    from bpe_openai import get_encoding

    return get_encoding(ENCODING)


def encoding() -> Encoding:
    """The encoder, loaded on first use (once, whichever thread asks first): importing
    ``bpe_openai`` reads the ranks of every encoding it ships, about a second, which a run
    whose sessions all fit never needs."""
    with _loading:
        return _load()


#: Tokens kept free besides the messages and the output reserve (joins, rounding).
BUDGET_MARGIN_TOKENS = 32
#: The contents always get at least this many tokens (a window too small for the messages
#: and the output reserve then fails as ``context_overflow`` without a request).
MIN_BUDGET_TOKENS = 1_000


def stage_one_budget(context_window: int | None, *, reserved_tokens: int = 0) -> int:
    """Tokens the rollout contents may take: window x 95% x 70%, but never more than what
    the window leaves after ``reserved_tokens`` (the rest of the messages and the output
    reserve) and a small margin, and at least ``MIN_BUDGET_TOKENS``; 150,000 when the
    window is unknown."""
    if not context_window:
        return FALLBACK_BUDGET_TOKENS
    share = int(context_window * WINDOW_USABLE * WINDOW_INPUT_SHARE)
    room = context_window - reserved_tokens - BUDGET_MARGIN_TOKENS
    return max(min(share, room), MIN_BUDGET_TOKENS)


#: Characters of items kept from each end of a session before it is rendered: far more than
#: its token budget can hold (sessions run 2-5 characters per token).
KEEP_CHARS_PER_TOKEN = 16


def stage_one_keep_chars(context_window: int | None) -> int:
    """How much of a session's item text, from each end, can reach its stage-one input."""
    return stage_one_budget(context_window) * KEEP_CHARS_PER_TOKEN


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about ``PIECE_CHARS``, cut at line ends, made one at a time (a
    long text is not copied whole into a list of pieces)."""
    start = 0
    n = len(text)
    while start < n:
        end = min(start + PIECE_CHARS, n)
        if end < n:
            cut = text.rfind("\n", start + PIECE_CHARS // 2, end)
            if cut > start:
                end = cut + 1
        yield text[start:end]
        start = end


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (piecewise; decoding them gives back exactly ``text``)."""
    enc = encoding()
    ids: list[int] = []
    for piece in _pieces(text):
        ids.extend(enc.encode_ordinary(piece))
    return ids


def count_tokens(text: str) -> int:
    """An upper bound of the ``o200k_base`` token count of ``text`` (exact below 64k chars)."""
    enc = encoding()
    tokens = pieces = 0
    for piece in _pieces(text):
        tokens += len(enc.encode_ordinary(piece))
        pieces += 1
    return tokens + max(pieces - 1, 0)


class Truncation:
    """What the budget did to a text: its token counts before and after, and the budget.

    A text whose size alone proves that it fits (a token is at least one byte) is kept whole
    and counted only when a count is asked for: most sessions fit, and encoding them (and
    loading the encoder) is the costly part of building a request.
    """

    def __init__(
        self,
        budget: int,
        *,
        before: int | None = None,
        after: int | None = None,
        whole: str | None = None,
    ) -> None:
        if whole is None and (before is None or after is None):
            raise ValueError("a Truncation needs both counts, or the whole text to count")
        self.budget = budget
        self._before = before
        self._after = after
        self._whole = whole

    @classmethod
    def kept_whole(cls, text: str, budget: int) -> Truncation:
        """``text`` fits the budget by its size; count it later, if ever."""
        return cls(budget, whole=text)

    @cached_property
    def tokens_after(self) -> int:
        if self._after is not None:
            return self._after
        return count_tokens(self._whole or "")

    @cached_property
    def tokens_before(self) -> int:
        return self._before if self._before is not None else self.tokens_after

    @property
    def truncated(self) -> bool:
        return self._whole is None and self.tokens_before > self.budget

    @property
    def removed(self) -> int:
        return max(self.tokens_before - self.tokens_after, 0)

    def __repr__(self) -> str:
        if self._whole is not None and "tokens_after" not in self.__dict__:
            return f"Truncation(budget={self.budget}, kept whole, not counted)"
        return (
            f"Truncation(budget={self.budget}, tokens_before={self.tokens_before}, "
            f"tokens_after={self.tokens_after})"
        )


def marker(removed: int) -> str:
    return f"\n…{removed} tokens truncated…\n"


def _tail_pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about ``PIECE_CHARS``, cut at line ends, last piece first, made
    one at a time."""
    end = len(text)
    while end > 0:
        start = max(end - PIECE_CHARS, 0)
        if start > 0:
            cut = text.find("\n", start, end - PIECE_CHARS // 2)
            if cut >= 0:
                start = cut + 1
        yield text[start:end]
        end = start


def _take(pieces: Iterable[str], tokens: int, *, from_end: bool) -> tuple[str, int, int]:
    """The longest run of whole pieces, plus part of the next, holding at most ``tokens``
    tokens: ``(text, an upper bound of its tokens, characters consumed)``. Only the piece
    where the cut falls is decoded; partial characters at the cut are dropped. Each join
    between pieces is charged one token, so the bound holds for the joined text."""
    enc = encoding()
    kept: list[str] = []
    used = consumed = 0
    for piece in pieces:
        ids = enc.encode_ordinary(piece)
        join = 1 if kept else 0
        if used + len(ids) + join <= tokens:
            kept.append(piece)
            used += len(ids) + join
            consumed += len(piece)
            continue
        room = max(tokens - used - join, 0)
        part_ids = ids[len(ids) - room :] if from_end else ids[:room]
        part = enc.decode_bytes(part_ids).decode("utf-8", errors="ignore") if room else ""
        if part:
            kept.append(part)
            used += room + join
            consumed += len(part)
        break
    if from_end:
        kept.reverse()
    return "".join(kept), used, consumed


def truncate_middle(text: str, budget: int, *, omitted_chars: int = 0) -> tuple[str, Truncation]:
    """Cut ``text`` to at most ``budget`` tokens, keeping its head and tail in equal shares,
    with a visible ``…N tokens truncated…`` marker; never splits a UTF-8 character.

    A token is at least one byte, so a text of at most ``budget`` bytes is kept whole without
    encoding it (it is counted if a count is asked for). A longer text is encoded piece by
    piece from its two ends only until each share is full; what is kept is counted (never
    below the real count), while ``N`` is counted for a text near the budget and estimated
    from the characters removed, at the kept part's characters-per-token rate, for a text
    far over it.

    ``omitted_chars`` says ``text`` is already the head and the tail of a longer text, that
    many characters having been left out between them (``keep_chars`` of
    ``contents_by_rollout``): they count in ``N``, and the cut is never exact.
    """
    if omitted_chars:
        return _truncate_far(text, budget, omitted_chars)
    if len(text.encode("utf-8")) <= budget:
        return text, Truncation.kept_whole(text, budget)
    marker_cost = count_tokens(marker(10**12)) + 2  # the marker, and a token at each join
    keep = max(budget - marker_cost, 0)
    head, head_used, head_chars = _take(_pieces(text), keep // 2, from_end=False)
    tail, tail_used, tail_chars = _take(_tail_pieces(text), keep - keep // 2, from_end=True)
    middle = len(text) - head_chars - tail_chars
    rate = (head_used + tail_used) / max(head_chars + tail_chars, 1)
    removed = max(round(middle * rate), 1)
    if middle <= 0 or removed <= max(4 * marker_cost, budget // 8):
        # near the budget (the ends met, or little is estimated to be left out): the
        # estimate could cut a text that fits, so count the whole text and cut it exactly
        total = count_tokens(text)
        if total <= budget:
            return text, Truncation(budget, before=total, after=total)
        ids, enc = encode(text), encoding()
        while True:
            head_n = keep // 2
            tail_n = keep - head_n
            head = enc.decode_bytes(ids[:head_n]).decode("utf-8", errors="ignore")
            tail = enc.decode_bytes(ids[len(ids) - tail_n :]).decode("utf-8", errors="ignore")
            out = head + marker(len(ids) - head_n - tail_n) + tail
            after = count_tokens(out)
            # the two ends, encoded again beside the marker, can take a few more tokens
            # than the slices they came from: cut by the excess until the whole fits
            if after <= budget or keep == 0:
                return out, Truncation(budget, before=total, after=after)
            keep = max(keep - (after - budget), 0)
    out = head + marker(removed) + tail
    after = head_used + tail_used + marker_cost  # an upper bound, without encoding again
    return out, Truncation(budget, before=after + removed, after=after)


def _truncate_far(text: str, budget: int, omitted_chars: int) -> tuple[str, Truncation]:
    """``truncate_middle`` of a text whose middle was left out before it was rendered."""
    marker_cost = count_tokens(marker(10**12)) + 2
    keep = max(budget - marker_cost, 0)
    head, head_used, head_chars = _take(_pieces(text), keep // 2, from_end=False)
    room = len(text) - head_chars
    tail, tail_used, tail_chars = _take(_tail_pieces(text), keep - keep // 2, from_end=True)
    if tail_chars > room:  # the two ends met: the tail starts where the head stops
        tail, tail_chars = text[head_chars:], room
    middle = len(text) - head_chars - tail_chars + omitted_chars
    rate = (head_used + tail_used) / max(head_chars + tail_chars, 1)
    removed = max(round(middle * rate), 1)
    out = head + marker(removed) + tail
    after = head_used + tail_used + marker_cost
    return out, Truncation(budget, before=after + removed, after=after)
