"""Token counts and the stage-one budget, with OpenAI's ``o200k_base`` encoding (offline).

The encoder refuses very long inputs, so text is encoded in pieces cut at line ends. A cut
can only lose merges across it, never add them, and each cut is also charged one extra
token, so the count is never lower than the real one: a request built to the budget cannot
overflow the model's window.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from bpe_openai import Encoding, get_encoding

#: Share of the context window stage one may fill with rollout contents (Codex's 95% x 70%).
WINDOW_USABLE = 0.95
WINDOW_INPUT_SHARE = 0.70
#: Budget when the model's window is unknown.
FALLBACK_BUDGET_TOKENS = 150_000
#: Characters encoded at once (the encoder rejects inputs far below a megabyte).
PIECE_CHARS = 64_000

ENCODING = "o200k_base"


@cache
def encoding() -> Encoding:
    return get_encoding(ENCODING)


def stage_one_budget(context_window: int | None) -> int:
    """Tokens the rollout contents may take: window x 95% x 70%, else 150,000."""
    if not context_window:
        return FALLBACK_BUDGET_TOKENS
    return int(context_window * WINDOW_USABLE * WINDOW_INPUT_SHARE)


def _pieces(text: str) -> list[str]:
    out: list[str] = []
    start = 0
    n = len(text)
    while start < n:
        end = min(start + PIECE_CHARS, n)
        if end < n:
            cut = text.rfind("\n", start + PIECE_CHARS // 2, end)
            if cut > start:
                end = cut + 1
        out.append(text[start:end])
        start = end
    return out


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (piecewise; decoding them gives back exactly ``text``)."""
    enc = encoding()
    ids: list[int] = []
    for piece in _pieces(text):
        ids.extend(enc.encode_ordinary(piece))
    return ids


def count_tokens(text: str) -> int:
    """An upper bound of the ``o200k_base`` token count of ``text`` (exact below 64k chars)."""
    pieces = _pieces(text)
    enc = encoding()
    return sum(len(enc.encode_ordinary(p)) for p in pieces) + max(len(pieces) - 1, 0)


@dataclass(frozen=True)
class Truncation:
    """What the budget did to a text."""

    tokens_before: int
    tokens_after: int
    budget: int

    @property
    def truncated(self) -> bool:
        return self.tokens_before > self.budget

    @property
    def removed(self) -> int:
        return max(self.tokens_before - self.tokens_after, 0)


def marker(removed: int) -> str:
    return f"\n…{removed} tokens truncated…\n"


def truncate_middle(text: str, budget: int) -> tuple[str, Truncation]:
    """Cut ``text`` to at most ``budget`` tokens, keeping its head and tail in equal shares,
    with a visible ``…N tokens truncated…`` marker; never splits a UTF-8 character."""
    total = count_tokens(text)
    if total <= budget:
        return text, Truncation(total, total, budget)
    ids = encode(text)
    enc = encoding()
    slack = count_tokens(marker(len(ids))) + 4  # the marker, and a token at each join
    keep = max(budget - slack, 0)
    while True:
        head_n = keep // 2
        tail_n = keep - head_n
        head = enc.decode_bytes(ids[:head_n]).decode("utf-8", errors="ignore")
        tail = enc.decode_bytes(ids[len(ids) - tail_n :]).decode("utf-8", errors="ignore")
        removed = len(ids) - head_n - tail_n
        out = head + marker(removed) + tail
        after = count_tokens(out)
        if after <= budget or keep == 0:
            return out, Truncation(total, after, budget)
        keep = max(keep - (after - budget), 0)
