"""A prepared batch meeting the store: duplicates, item numbering and file statuses."""

from __future__ import annotations

import polars as pl

from memkiln.transforms.settle import (
    file_statuses,
    number_items,
    settle_duplicates,
    with_unrecognized,
)

QUARANTINE = pl.DataFrame(
    schema={
        "file_id": pl.Int64,
        "line_no": pl.Int32,
        "reason": pl.String,
        "detail": pl.String,
        "excerpt": pl.String,
        "bytes": pl.Int64,
    }
)


def test_a_session_twice_in_a_batch_is_kept_by_the_lowest_file_and_one_held_elsewhere_by_none() -> (
    None
):
    rollouts = pl.DataFrame({"fid": [3, 1, 2], "rollout_id": ["a", "a", "b"]})
    held = pl.DataFrame({"rollout_id": ["b"], "holder": [9]})
    kept, quarantine, dup = settle_duplicates(rollouts, QUARANTINE, held)
    assert kept.rows() == [(1, "a")]
    assert sorted(dup["fid"].to_list()) == [2, 3]
    assert sorted(quarantine["file_id"].to_list()) == [2, 3]
    assert set(quarantine["reason"]) == {"duplicate_rollout"}
    assert "session b is already held by another file" in quarantine["detail"].to_list()


def test_items_of_kept_files_are_numbered_per_file_in_order() -> None:
    items = pl.DataFrame({"fid": [1, 1, 2, 1, 3], "text": ["x", "y", "dup", "z", "w"]})
    rollouts = pl.DataFrame({"fid": [1, 3], "rollout_id": ["a", "c"]})
    numbered = number_items(items, rollouts)
    assert numbered.select("rollout_id", "seq", "text").rows() == [
        ("a", 0, "x"),
        ("a", 1, "y"),
        ("a", 2, "z"),
        ("c", 0, "w"),
    ]


def test_each_file_gets_its_status_and_an_unknown_format_is_quarantined_with_its_path() -> None:
    files = pl.DataFrame(
        {
            "file_id": [1, 2, 3, 4, 5],
            "path": ["/a", "/b", "/c", "/d", "/e"],
            "size": [10, 20, 30, 40, 50],
            "status": ["ok", "ok", "ok", "ok", "unreadable"],
        }
    )
    per_file = pl.DataFrame(
        {
            "fid": [1, 2, 3, 4],
            "format": ["codex", "codex", None, "pi"],
            "n_lines": [5, 5, 7, 0],
            "n_quarantined": [0, 2, 0, 0],
        }
    )
    rollouts = pl.DataFrame({"fid": [1, 2], "rollout_id": ["a", "b"]})
    dup = pl.DataFrame({"fid": [4]})
    settled = file_statuses(files, per_file, rollouts, dup)
    assert dict(settled.select("file_id", "status").rows()) == {
        1: "ok",
        2: "partial",
        3: "unrecognized",
        4: "duplicate",
        5: "unreadable",
    }
    assert settled.filter(pl.col("file_id") == 5)["lines"].to_list() == [0]
    quarantine = with_unrecognized(QUARANTINE, settled)
    assert quarantine.select("file_id", "reason", "bytes", "path").rows() == [
        (3, "unrecognized_format", 30, "/c")
    ]
