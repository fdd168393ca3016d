"""Ingest a few lines through the real loader (split, redact, parse, normalize, write) into an
in-memory store, without Prefect or files: fast enough to run hundreds of times in a test."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from memkiln.io.loader import PreparedBatch, normalize_chunks, write_batch
from memkiln.io.rules import load_rules
from memkiln.io.store import fetch_pl, open_store

SESSION_UUID = "019c0000-aaaa-7bbb-8ccc-0000000000aa"
PATH = f"/archive/sessions/rollout-2026-03-01T10-00-00-{SESSION_UUID}.jsonl"


@dataclass
class Stored:
    items: pl.DataFrame
    rollouts: pl.DataFrame
    quarantine: pl.DataFrame
    files: pl.DataFrame


class Harness:
    """One in-memory store and parser, emptied before each ingest (opening a store runs the
    migrations, which costs more than the ingest of a few lines)."""

    def __init__(self) -> None:
        self.rules = load_rules()
        self.store = open_store(":memory:")
        self.parser = duckdb.connect(":memory:")

    def close(self) -> None:
        self.store.close()
        self.parser.close()

    def ingest(self, data: bytes, *, path: str = PATH) -> Stored:
        """Ingest one file's bytes; return what the store holds afterwards."""
        for table in ("items", "rollouts", "quarantine", "files"):
            self.store.execute(f"delete from {table}")
        files = pl.DataFrame(
            {
                "file_id": [1],
                "path_key": ["k1"],
                "path": [path],
                "compression": ["none"],
                "size": [len(data)],
                "mtime_ns": [0],
                "content_hash": ["h"],
                "status": ["ok"],
            },
            schema={
                "file_id": pl.Int64,
                "path_key": pl.String,
                "path": pl.String,
                "compression": pl.String,
                "size": pl.Int64,
                "mtime_ns": pl.Int64,
                "content_hash": pl.String,
                "status": pl.String,
            },
        )
        norm = normalize_chunks(
            self.parser,
            [(1, data)] if data else [],
            files=files.select(fid="file_id", path="path"),
            rules=self.rules,
        )
        write_batch(self.store, PreparedBatch(files, norm, len(data)), run_id="r")
        return Stored(
            items=fetch_pl(self.store, "select * from items order by seq"),
            rollouts=fetch_pl(self.store, "select * from rollouts"),
            quarantine=fetch_pl(self.store, "select * from quarantine"),
            files=fetch_pl(self.store, "select * from files"),
        )


@functools.cache
def harness() -> Harness:
    """The process's harness (hypothesis runs a test body many times in one process)."""
    return Harness()


def ingest_bytes(data: bytes, *, path: str = PATH) -> Stored:
    return harness().ingest(data, path=path)


def accounted_lines(stored: Stored) -> set[int]:
    """Line numbers that ended as an item or a quarantined line."""
    return set(stored.items["line_no"].to_list()) | set(
        stored.quarantine["line_no"].drop_nulls().to_list()
    )


def jsonl(lines: list[Any]) -> bytes:
    """Objects as JSON lines; ``bytes`` entries are written as they are."""
    out = [ln if isinstance(ln, bytes) else json.dumps(ln).encode() for ln in lines]
    return b"\n".join(out) + b"\n"
