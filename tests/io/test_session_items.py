"""A very large session is read for its stage-one request in pieces, held near its ends
(``memkiln.io.session_items``): its message is the one its whole items make, and memory holds
at most a window of items at each end whatever the session holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.io.session_items import read_kept_items, window_chars
from memkiln.io.store import fetch_pl, sql
from memkiln.llm.requests import read_sessions
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.render import stage_one_inputs
from memkiln.transforms.session_window import SessionWindow, item_size_expr
from memkiln.transforms.tokens import stage_one_keep_chars
from tests.builders import codex_lines, uid, write_rollout

RULES = load_rules()


def messages_whole(
    con: duckdb.DuckDBPyConnection, ids: list[str], *, context_window: int
) -> dict[str, tuple[str, str, int]]:
    """The stage-one messages as they were built before: every item read, then filtered."""
    meta = fetch_pl(con, sql("request_sessions"), {"ids": ids})
    items = fetch_pl(con, sql("request_items"), {"ids": ids})
    kept = filter_memory_items(items.lazy()).sort("rollout_id", "seq").collect()
    return _messages(meta, kept, context_window=context_window)


def messages_read(
    con: duckdb.DuckDBPyConnection,
    ids: list[str],
    *,
    context_window: int,
    window: int,
    piece_chars: int,
) -> tuple[dict[str, tuple[str, str, int]], pl.DataFrame, pl.DataFrame]:
    meta = fetch_pl(con, sql("request_sessions"), {"ids": ids})
    read = read_kept_items(con, ids, window=window, piece_chars=piece_chars)
    meta = meta.join(read.gaps, on="rollout_id", how="left")
    return _messages(meta, read.items, context_window=context_window), read.items, read.gaps


def _messages(
    meta: pl.DataFrame, kept: pl.DataFrame, *, context_window: int
) -> dict[str, tuple[str, str, int]]:
    return {
        row["rollout_id"]: (prompt.system, prompt.user, prompt.truncation.budget)
        for row, prompt in stage_one_inputs(
            meta, kept.lazy(), context_window=context_window, max_output_tokens=2000, rules=RULES
        )
    }


@pytest.mark.corpus
@pytest.mark.parametrize(("context_window", "at_least"), [(12_000, 5), (32_000, 1)])
def test_every_corpus_session_read_in_pieces_gets_the_message_its_whole_items_make(
    ingested_corpus: Path, context_window: int, at_least: int
) -> None:
    # the smallest window allowed (what the budget keeps from each end), small pieces: most
    # long corpus sessions are read in pieces and lose their middle
    window = stage_one_keep_chars(context_window)
    with duckdb.connect(str(ingested_corpus / "m.duckdb"), read_only=True) as con:
        ids = [r[0] for r in con.execute("select rollout_id from rollouts order by 1").fetchall()]
        windowed = compared = 0
        for start in range(0, len(ids), 16):
            chunk = ids[start : start + 16]
            before = messages_whole(con, chunk, context_window=context_window)
            after, _, gaps = messages_read(
                con, chunk, context_window=context_window, window=window, piece_chars=65_536
            )
            assert after.keys() == before.keys()
            for rid, message in before.items():
                assert after[rid] == message, rid
                compared += 1
            windowed += gaps.height
    assert compared == len(ids) >= 50
    assert windowed >= at_least  # the path is taken, not only the whole read


@pytest.fixture
def long_session_store(tmp_path: Path) -> tuple[Path, str]:
    """A store holding one session of 60 turns of 20,000-character command outputs beside a
    short one."""
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    archive = tmp_path / "archive"
    lines = []
    for turn in range(60):
        lines += codex_lines(
            uid(1),
            request=f"step {turn}: make the build pass",
            at=at + timedelta(minutes=turn),
            calls=[(f"make step{turn}", f"line {turn} " * 2000 + "Exit code: 0")],
        )[(0 if turn == 0 else 1) :]
    write_rollout(archive, uid(1), lines, at)
    write_rollout(archive, uid(2), codex_lines(uid(2), request="a short one", at=at), at)
    db = tmp_path / "m.duckdb"
    ingest_archive(Settings(archive=archive, db=db))
    return db, uid(1)


def test_a_session_past_four_windows_is_held_within_a_window_of_each_end(
    long_session_store: tuple[Path, str],
) -> None:
    db, rid = long_session_store
    context_window = 12_000
    window = stage_one_keep_chars(context_window)
    with duckdb.connect(str(db), read_only=True) as con:
        ids = [rid, uid(2)]
        before = messages_whole(con, ids, context_window=context_window)
        whole = fetch_pl(con, sql("request_items"), {"ids": [rid]})
        whole = filter_memory_items(whole.lazy()).collect()
        after, held, gaps = messages_read(
            con, ids, context_window=context_window, window=window, piece_chars=50_000
        )
    assert after == before
    sizes = whole.select(item_size_expr())["text"]
    assert sizes.sum() > 4 * window  # the session is long …
    mine = held.filter(pl.col("rollout_id") == rid)
    biggest = int(sizes.max())  # type: ignore[arg-type]
    # … and only its ends are held: a window each, an item across each window's edge
    assert int(mine.select(item_size_expr())["text"].sum()) <= 2 * (window + biggest)
    assert mine["seq"].to_list() == sorted(mine["seq"].to_list())
    (gap,) = gaps.rows(named=True)
    assert gap["rollout_id"] == rid
    assert gap["gap_chars"] == int(sizes.sum()) - int(mine.select(item_size_expr())["text"].sum())
    assert held.filter(pl.col("rollout_id") == uid(2)).height  # the short one is read whole


def test_the_store_reader_holds_only_the_ends_of_a_session_past_four_windows(
    long_session_store: tuple[Path, str], tmp_path: Path
) -> None:
    db, rid = long_session_store
    todo = pl.DataFrame({"rollout_id": [rid]})
    with duckdb.connect(str(db)) as con:
        items = fetch_pl(con, sql("request_items"), {"ids": [rid]})
        _, kept = read_sessions(con, todo)
    # the whole session is far under the window at the default budget: read whole, as before
    assert kept.height == filter_memory_items(items.lazy()).collect().height
    assert window_chars(None) >= stage_one_keep_chars(None)
    assert window_chars(10_000_000) == stage_one_keep_chars(10_000_000)


def test_a_window_fed_in_pieces_holds_the_ends_and_counts_the_middle() -> None:
    sizes = [100, 5, 300, 40, 40, 40, 700, 10, 10, 10, 10, 200, 30]
    items = pl.DataFrame(
        {"seq": list(range(len(sizes))), "text": ["x" * (n - 64) if n > 64 else "" for n in sizes]}
    )
    real = items.with_columns(size=item_size_expr())["size"].to_list()
    total = sum(real)
    for window in (64, 100, 200, 400):
        for cut in (1, 2, 3, 5, len(sizes)):
            session = SessionWindow(window)
            for start in range(0, items.height, cut):
                session.add(items.slice(start, cut))
            held = session.items()
            assert held is not None
            before = [sum(real[:i]) for i in range(len(real))]
            after = [sum(real[i + 1 :]) for i in range(len(real))]
            if total <= 4 * window:
                want = list(range(len(real)))
            else:
                want = [i for i in range(len(real)) if before[i] < window or after[i] < window]
            assert held["seq"].to_list() == want, (window, cut)
            assert session.gap_chars == total - sum(real[i] for i in want)
            if session.gap_chars:
                missing = sorted(set(range(len(real))) - set(want))
                assert session.gap_seq == missing[-1] + 1
                assert missing == list(range(missing[0], missing[-1] + 1))  # one middle
