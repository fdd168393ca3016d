"""How often a memory was used: citations of rollout ids in later sessions' answers.

An assistant answer that used memories carries an ``<oai-mem-citation>`` block whose
``<rollout_ids>`` (legacy ``<thread_ids>``) list the sessions it drew on; each listed id
counts as one use, at the time of the citing item.
"""

from __future__ import annotations

import polars as pl

CITATION_BLOCK = r"(?s)<oai-mem-citation>.*?</oai-mem-citation>"
ID_LIST = r"(?s)<(?:rollout_ids|thread_ids)>(.*?)</(?:rollout_ids|thread_ids)>"


def citation_usage(items: pl.LazyFrame) -> pl.LazyFrame:
    """``rollout_id, usage_count, last_usage`` of every cited session.

    ``items`` needs ``item_type, role, text, ts`` (assistant messages are read).
    """
    blocks = (
        items.filter(
            (pl.col("item_type") == "message")
            & (pl.col("role") == "assistant")
            & pl.col("text").str.contains("<oai-mem-citation>", literal=True)
        )
        .select("ts", block=pl.col("text").str.extract_all(CITATION_BLOCK))
        .explode("block")
        .select("ts", ids=pl.col("block").str.extract(ID_LIST, 1))
        .drop_nulls("ids")
    )
    return (
        blocks.select(
            "ts",
            cited=pl.col("ids").str.replace_all(r"[\s,;]+", " ").str.strip_chars().str.split(" "),
        )
        .explode("cited")
        .filter(pl.col("cited").str.len_chars() > 0)
        .group_by(rollout_id="cited")
        .agg(usage_count=pl.len().cast(pl.Int64), last_usage=pl.col("ts").max())
    )
