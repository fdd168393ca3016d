"""The kept items of a chunk's sessions, read from the store for their stage-one requests,
with memory bounded whatever a session holds.

A session under ``4 * window`` characters of items a model may be shown (``request_item_sizes``:
at least what its kept items hold) is read whole, as it always was (``request_items``). A
longer one (a session file may hold up to ``MAX_FILE_BYTES``) is read in pieces of about
``SESSION_PIECE_CHARS`` in order (``request_items_range``), each filtered as a whole session
is, and only its first and last ``window`` characters of kept items are held
(``transforms.session_window``): its stage-one message is the one its whole items make, as
long as ``window`` is at least what the budget keeps from each end; the heuristic, the chunks
of a chunked request and the stored segments see the held items.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import polars as pl

from memkiln.constants import LARGE_SESSION_WINDOW_CHARS, SESSION_PIECE_CHARS
from memkiln.io.store import fetch_pl, sql
from memkiln.transforms.filtering import (
    DROPPED_ROLES,
    KEPT_ITEM_TYPES,
    KEPT_RECORD_TYPES,
    filter_memory_items,
)
from memkiln.transforms.render import ITEM_OVERHEAD_CHARS
from memkiln.transforms.session_window import SessionWindow
from memkiln.transforms.tokens import stage_one_keep_chars

#: The columns that say what a session's held items leave out (null: nothing).
GAP_SCHEMA = {"rollout_id": pl.String, "gap_seq": pl.Int32, "gap_chars": pl.Int64}


@dataclass(frozen=True)
class KeptItems:
    """A chunk's kept items, sorted by session and ``seq``, and per session read in pieces
    the middle not held (``GAP_SCHEMA``; none for a session read whole)."""

    items: pl.DataFrame
    gaps: pl.DataFrame


def window_chars(context_window: int | None) -> int:
    """Characters held from each end of a very large session: at least what the stage-one
    budget keeps from each end, so the message is the whole session's."""
    return max(LARGE_SESSION_WINDOW_CHARS, stage_one_keep_chars(context_window))


def _filter_params() -> dict[str, object]:
    return {
        "record_types": list(KEPT_RECORD_TYPES),
        "item_types": list(KEPT_ITEM_TYPES),
        "dropped_roles": list(DROPPED_ROLES),
        "overhead": ITEM_OVERHEAD_CHARS,
    }


def item_sizes(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, int]:
    """Each session's characters of items a model may be shown (``request_item_sizes``), as
    the budget sizes them; a session with none is absent."""
    sizes = fetch_pl(con, sql("request_item_sizes"), {"ids": ids, **_filter_params()})
    return dict(zip(sizes["rollout_id"].to_list(), sizes["chars"].to_list(), strict=True))


def read_kept_items(
    con: duckdb.DuckDBPyConnection,
    ids: list[str],
    *,
    window: int,
    piece_chars: int = SESSION_PIECE_CHARS,
) -> KeptItems:
    """The kept items of the sessions ``ids`` (``filter_memory_items``), each session over
    ``4 * window`` characters read in pieces and held within ``window`` of its ends."""
    params = _filter_params()
    sizes = fetch_pl(con, sql("request_item_sizes"), {"ids": ids, **params})
    large = sizes.filter(pl.col("chars") > 4 * window)["rollout_id"].to_list()
    in_pieces = set(large)
    whole_ids = [rid for rid in ids if rid not in in_pieces]
    frames: list[pl.DataFrame] = []
    gaps: list[dict[str, object]] = []
    items = fetch_pl(con, sql("request_items"), {"ids": whole_ids})
    frames.append(filter_memory_items(items.lazy()).collect())
    del items
    for rid in large:
        held, gap_seq, gap_chars = _read_in_pieces(
            con, rid, window=window, piece_chars=piece_chars, params=params
        )
        if held is not None:
            frames.append(held)
        if gap_chars:
            gaps.append({"rollout_id": rid, "gap_seq": gap_seq, "gap_chars": gap_chars})
    kept = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")
    return KeptItems(
        items=kept.sort("rollout_id", "seq"), gaps=pl.DataFrame(gaps, schema=GAP_SCHEMA)
    )


def _read_in_pieces(
    con: duckdb.DuckDBPyConnection,
    rid: str,
    *,
    window: int,
    piece_chars: int,
    params: dict[str, object],
) -> tuple[pl.DataFrame | None, int | None, int]:
    """One session's held items, read in pieces of about ``piece_chars`` (an item longer
    alone is a piece), and the middle left out: ``(items, gap_seq, gap_chars)``."""
    seqs = fetch_pl(con, sql("request_item_seq_sizes"), {"id": rid, **params})
    piece_of = (seqs["chars"].cum_sum() - seqs["chars"]) // piece_chars
    bounds = (
        seqs.with_columns(piece=piece_of)
        .group_by("piece", maintain_order=True)
        .agg(first=pl.col("seq").first(), last=pl.col("seq").last())
    )
    session = SessionWindow(window)
    for first, last in zip(bounds["first"], bounds["last"], strict=True):
        filters = {k: v for k, v in params.items() if k != "overhead"}
        piece = fetch_pl(
            con,
            sql("request_items_range"),
            {"id": rid, "first": int(first), "last": int(last), **filters},
        )
        session.add(filter_memory_items(piece.lazy()).collect())
        del piece
    return session.items(), session.gap_seq, session.gap_chars
