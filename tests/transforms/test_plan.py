"""Which files to read again."""

from __future__ import annotations

import polars as pl

from memkiln.transforms.plan import FOUND_SCHEMA, KNOWN_SCHEMA, batches, plan_files


def test_plan_marks_new_changed_and_unchanged_and_numbers_new_files_after_known_ones() -> None:
    found = pl.DataFrame(
        [("/a", 10, 1), ("/b", 20, 2), ("/c", 30, 3), ("/d", 5, 9)],
        schema=FOUND_SCHEMA,
        orient="row",
    )
    known = pl.DataFrame(
        [(4, "/a", 10, 1, "ok"), (7, "/b", 20, 99, "ok")], schema=KNOWN_SCHEMA, orient="row"
    )
    out = plan_files(found, known)
    assert out.select("path", "file_id", "action").rows() == [
        ("/a", 4, "unchanged"),
        ("/b", 7, "changed"),
        ("/c", 8, "new"),
        ("/d", 9, "new"),
    ]


def test_a_file_that_could_not_be_opened_is_read_again_though_unchanged() -> None:
    found = pl.DataFrame([("/a", 10, 1), ("/b", 20, 2)], schema=FOUND_SCHEMA, orient="row")
    known = pl.DataFrame(
        [(1, "/a", 10, 1, "unreadable"), (2, "/b", 20, 2, "corrupt")],
        schema=KNOWN_SCHEMA,
        orient="row",
    )
    out = plan_files(found, known)
    # a corrupt file reads the same until it changes; an unreadable one may open now
    assert out.select("path", "action").rows() == [("/a", "changed"), ("/b", "unchanged")]


def test_plan_on_an_empty_store_numbers_from_one() -> None:
    found = pl.DataFrame([("/x", 1, 1)], schema=FOUND_SCHEMA, orient="row")
    out = plan_files(found, pl.DataFrame(schema=KNOWN_SCHEMA))
    assert out["file_id"].to_list() == [1]


def test_batches_bound_bytes_and_keep_a_large_file_alone() -> None:
    plan = pl.DataFrame(
        {
            "path": list("abcde"),
            "size": [40, 40, 200, 10, 10],
            "mtime_ns": [0] * 5,
            "file_id": [1, 2, 3, 4, 5],
            "action": ["new", "new", "new", "unchanged", "changed"],
        }
    )
    out = batches(plan, max_bytes=100, max_files=10)
    assert [b["path"].to_list() for b in out] == [["a", "b"], ["c"], ["e"]]
