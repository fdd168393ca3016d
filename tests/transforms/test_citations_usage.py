"""Memory usage from citations, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): only
assistant messages count, every block and every listed id counts, at the latest time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from memkiln.transforms.citations import citation_usage

T = datetime(2026, 10, 1, tzinfo=UTC)


def usage(rows: list[tuple[str, str, str, datetime]]) -> list[tuple[str, int, datetime]]:
    items = pl.DataFrame(rows, schema=["item_type", "role", "text", "ts"], orient="row")
    out = citation_usage(items.lazy()).collect().sort("rollout_id")
    assert out.schema["usage_count"] == pl.Int64
    return out.select("rollout_id", "usage_count", "last_usage").rows()


def cite(*ids: str, tag: str = "rollout_ids", sep: str = "\n") -> str:
    return f"<oai-mem-citation><{tag}>{sep.join(ids)}</{tag}></oai-mem-citation>"


def test_every_block_and_every_listed_id_counts_once_at_the_latest_time() -> None:
    rows = [
        ("message", "assistant", f"{cite('a', 'b', sep=', ')} then {cite('a', sep=' ; ')}", T),
        ("message", "assistant", cite("b", tag="thread_ids"), T + timedelta(hours=2)),
        ("message", "assistant", cite("a") + "\n" + cite(" ", sep=""), T - timedelta(hours=1)),
    ]
    assert usage(rows) == [("a", 3, T), ("b", 2, T + timedelta(hours=2))]


def test_citations_outside_assistant_messages_do_not_count() -> None:
    rows = [
        ("message", "user", cite("u"), T),
        ("function_call_output", None, cite("tool"), T),
        ("message", "assistant", "<oai-mem-citation>no id list</oai-mem-citation>", T),
        ("message", "assistant", "no citation", T),
    ]
    assert usage(rows) == []  # type: ignore[arg-type]
