"""Which files to read, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): batch edges and
files known without a status."""

from __future__ import annotations

import polars as pl

from memkiln.transforms.plan import FOUND_SCHEMA, KNOWN_SCHEMA, batches, plan_files


def _plan(sizes: list[int]) -> pl.DataFrame:
    n = len(sizes)
    return pl.DataFrame(
        {
            "path": [f"f{i}" for i in range(n)],
            "size": sizes,
            "mtime_ns": [0] * n,
            "file_id": list(range(1, n + 1)),
            "action": ["new"] * n,
        }
    )


def _paths(out: list[pl.DataFrame]) -> list[list[str]]:
    return [b["path"].to_list() for b in out]


def test_a_batch_may_hold_exactly_max_bytes() -> None:
    assert _paths(batches(_plan([50, 50, 1]), max_bytes=100, max_files=10)) == [
        ["f0", "f1"],
        ["f2"],
    ]


def test_a_batch_holds_at_most_max_files() -> None:
    assert _paths(batches(_plan([1] * 5), max_bytes=100, max_files=2)) == [
        ["f0", "f1"],
        ["f2", "f3"],
        ["f4"],
    ]


def test_nothing_to_read_is_no_batch() -> None:
    assert batches(_plan([]), max_bytes=100, max_files=2) == []


def test_a_known_file_without_a_status_is_unchanged_when_its_fingerprint_is() -> None:
    found = pl.DataFrame([("/a", 10, 1), ("/b", 10, 2)], schema=FOUND_SCHEMA, orient="row")
    known = pl.DataFrame(
        [(3, "/a", 10, 1, None), (5, "/b", 11, 2, None)], schema=KNOWN_SCHEMA, orient="row"
    )
    assert plan_files(found, known).select("path", "file_id", "action").rows() == [
        ("/a", 3, "unchanged"),
        ("/b", 5, "changed"),
    ]


def test_new_files_are_numbered_in_order_after_the_highest_known_id() -> None:
    found = pl.DataFrame(
        [("/n1", 1, 1), ("/k", 1, 1), ("/n2", 1, 1)], schema=FOUND_SCHEMA, orient="row"
    )
    known = pl.DataFrame([(41, "/k", 1, 1, "ok")], schema=KNOWN_SCHEMA, orient="row")
    assert plan_files(found, known).select("path", "file_id").rows() == [
        ("/n1", 42),
        ("/k", 41),
        ("/n2", 43),
    ]
