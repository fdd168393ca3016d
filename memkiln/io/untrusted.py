"""The imperative sentences of a project's sessions that nobody typed (the copied-instruction
filter's input, ``transforms.trust``), read from the store in batches of rows: what one text
gives depends on that text alone, so the union over batches is what all the texts give at once,
and memory holds a batch, not a project's sessions (one may hold up to ``MAX_FILE_BYTES``).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import polars as pl

from memkiln.io.store import sql
from memkiln.transforms.trust import distrusted, untrusted_sentences

#: Rows of texts read at once.
UNTRUSTED_BATCH_ROWS = 512


def untrusted_of(
    con: duckdb.DuckDBPyConnection, ids: list[str], *, batch_rows: int = UNTRUSTED_BATCH_ROWS
) -> frozenset[str]:
    """The sentences of the sessions ``ids`` that nobody typed (``untrusted_texts``), without
    those the user typed too (``trust.distrusted``)."""
    found: set[str] = set()
    for batch in _batches(con, ids, batch_rows):
        found |= untrusted_sentences(batch.filter(~pl.col("typed"))["text"])
    if found:  # the sentences the user typed too are taken back, batch by batch
        for batch in _batches(con, ids, batch_rows):
            typed = batch.filter(pl.col("typed"))["text"]
            if typed.len():
                found = distrusted(found, typed.to_list())
    return frozenset(found)


def _batches(con: duckdb.DuckDBPyConnection, ids: list[str], rows: int) -> Iterator[pl.DataFrame]:
    """The rows of ``untrusted_texts`` (``typed, text``), streamed ``rows`` at a time."""
    reader = con.sql(sql("untrusted_texts"), params={"ids": ids}).to_arrow_reader(rows)
    for batch in reader:
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        yield frame
