"""Memory-relevant filtering, pinned at the edges where a changed line must fail a test (``bench/mutation.py``)."""

from __future__ import annotations

from typing import Any

import polars as pl

from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.normalize import ITEM_COLUMNS
from tests.transforms.test_filtering import item, kept


def _filtered(*rows: dict[str, Any]) -> pl.DataFrame:
    return filter_memory_items(pl.DataFrame(list(rows), schema=ITEM_COLUMNS).lazy()).collect()


def test_a_user_messages_kept_parts_are_joined_line_by_line() -> None:
    row = item(parts=["fix the tests", "<skill>x</skill>", "then push"])
    assert kept(row) == [("response_item", "message", "user", "fix the tests\nthen push")]


def test_a_message_without_a_role_is_kept() -> None:
    assert kept(item(role=None, parts=["hello"])) == [("response_item", "message", None, "hello")]


def test_a_part_without_text_is_not_taken_for_an_injection() -> None:
    row = item(parts=["look at this"])
    row["parts"] = [{"type": "input_image", "text": None}, {"type": "input_text", "text": "look"}]
    out = _filtered(row)
    assert out["parts"].to_list() == [
        [{"type": "input_image", "text": None}, {"type": "input_text", "text": "look"}]
    ]
    assert out["text"].to_list() == ["look"]


def test_a_message_without_parts_is_dropped() -> None:
    row = item(role="assistant", parts=None, text="orphan text")
    assert kept(row) == []
