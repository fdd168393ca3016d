"""What of a very large session is read for its stage-one request: its kept items within
``window`` characters of its start and of its end, and the size of the middle left out.

The stage-one message of a session longer than four times the characters its budget keeps
from each end (``stage_one_keep_chars``) is made of its first and last items only
(``render.contents_by_rollout``); the rest is counted in the truncation marker. A session
read in pieces (``memkiln.io.session_items``) goes through :class:`SessionWindow` one piece
at a time: every item is held until the session is known to be over four windows long, then
only the first window and a rolling last window are, and the items between them are
counted. With a window of at least what the budget keeps from each end, the message made of
what is held, given the middle's size (``gap_chars``, after ``gap_seq``), is the message
made of the whole session.

Pure: frames in, frames out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from memkiln.transforms.render import ITEM_OVERHEAD_CHARS


def item_size_expr() -> pl.Expr:
    """An item's size as the stage-one budget counts it (``contents_by_rollout``)."""
    return pl.col("text").str.len_chars().fill_null(0).cast(pl.Int64) + ITEM_OVERHEAD_CHARS


@dataclass
class SessionWindow:
    """One session's kept items, fed in order (:meth:`add`), of which at most the first
    ``window`` and the last ``window`` characters are held once the session passes
    ``4 * window``."""

    window: int
    pieces: list[pl.DataFrame] = field(default_factory=list)  # every item, while short
    held_chars: int = 0
    head: pl.DataFrame | None = None  # once long: the first window …
    tail: pl.DataFrame | None = None  # … and the last one
    gap_seq: int | None = None  # the first item after the middle left out
    gap_chars: int = 0  # the size of the middle left out

    def add(self, piece: pl.DataFrame) -> None:
        """The session's next kept items (sorted by ``seq``)."""
        if piece.is_empty():
            return
        sized = piece.with_columns(_size=item_size_expr())
        if self.head is None:
            self.pieces.append(sized)
            self.held_chars += int(sized["_size"].sum())
            if self.held_chars <= 4 * self.window:
                return
            whole = pl.concat(self.pieces, how="vertical_relaxed")
            self.pieces = []
            before = whole["_size"].cum_sum() - whole["_size"]
            self.head = whole.filter(before < self.window)
            self.tail = whole.filter(before >= self.window)
        else:
            assert self.tail is not None
            self.tail = pl.concat([self.tail, sized], how="vertical_relaxed")
        self._trim()

    def _trim(self) -> None:
        """Let go of the tail's items with a window or more after them (they stay so)."""
        assert self.tail is not None
        tail = self.tail
        after = tail["_size"].cum_sum(reverse=True) - tail["_size"]
        gone = tail.filter(after >= self.window)
        if gone.height:
            self.gap_chars += int(gone["_size"].sum())
            self.tail = tail.filter(after < self.window)
        if self.gap_chars and self.tail.height:
            self.gap_seq = int(self.tail["seq"][0])

    def items(self) -> pl.DataFrame | None:
        """What is held, in order (``None`` when nothing was fed)."""
        if self.head is None:
            held = self.pieces
        else:
            assert self.tail is not None
            held = [self.head, self.tail]
        held = [frame for frame in held if frame.height]
        if not held:
            return None
        return pl.concat(held, how="vertical_relaxed").drop("_size")


def by_size(ids: list[str], held: dict[str, int], *, bound: int) -> list[list[str]]:
    """``ids`` in order, cut into runs whose sessions hold at most ``bound`` characters
    together once read (``held``; a session absent holds nothing), a session larger alone a
    run of its own: extraction prepares its sessions a run at a time, so that what a prepared
    group holds (its items, then its rendered requests: a chunked session's chunks hold it
    whole) does not grow with the sizes of its sessions."""
    runs: list[list[str]] = []
    total = 0
    for rid in ids:
        size = held.get(rid, 0)
        if runs and total + size <= bound:
            runs[-1].append(rid)
            total += size
        else:
            runs.append([rid])
            total = size
    return runs
