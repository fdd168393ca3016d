"""Hits counted while redacting equal the hits counted by a second look at the changed texts.

Ingest counts the replaced spans per rule as it redacts items, rollouts and quarantined lines
(``redact_counted_series``, ``redact_frame_counted``) instead of redacting the changed texts a
second time (``rule_hit_counts``); both must give the same text and counts.
"""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

from memkiln.io.rules import load_rules
from memkiln.transforms.normalize import redact_items
from memkiln.transforms.redact import (
    RuleSet,
    redact_counted_series,
    redact_frame_counted,
    redact_series,
    rule_hit_counts,
)
from tests.transforms.test_redact import FIXTURE_SECRETS, ORDINARY, PLACEMENTS


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _lines() -> list[str | None]:
    """Every fixture secret in every placement, some twice in one line or repeated in other
    lines, between ordinary lines, nulls and empty strings."""
    lines: list[str | None] = [None, "", *ORDINARY]
    for fx in FIXTURE_SECRETS:
        for build in PLACEMENTS.values():
            lines.append(build(fx))
    lines += [" ".join(t for t in lines[i : i + 5] if t) for i in range(0, len(lines), 5)]
    return lines + lines[: len(lines) // 3]


def _hits_by_second_look(texts: pl.Series, rules: RuleSet) -> dict[str, int]:
    redacted = redact_series(texts, rules=rules)
    changed = pl.LazyFrame({"t": texts.filter((redacted != texts).fill_null(False))})
    return dict(rule_hit_counts(changed, column="t", rules=rules).collect().iter_rows())


def test_hits_counted_while_redacting_equal_a_second_look_at_the_changed_texts(
    rules: RuleSet,
) -> None:
    texts = pl.Series("t", _lines(), dtype=pl.String)
    text, hits = redact_counted_series(texts, rules=rules)
    assert_series_equal(text, redact_series(texts, rules=rules))
    expected = _hits_by_second_look(texts, rules)
    assert list(hits.items()) == list(expected.items())  # same rules, counts and order
    # the fixtures reach every kind of rule: passes, the maintained rule set, the context rule
    kinds = {rule.pass_name for rule in rules.rules if rule.id in hits}
    assert kinds == {"block", "token", "keyed"}
    assert rules.external is not None
    assert set(hits) & set(rules.external.rule_ids)
    assert set(hits) & {rule.id for rule in rules.context}
    assert sum(hits.values()) > 2 * len(FIXTURE_SECRETS)


def test_nothing_to_redact_counts_nothing(rules: RuleSet) -> None:
    texts = pl.Series("t", [None, "", *ORDINARY], dtype=pl.String)
    assert redact_counted_series(texts, rules=rules)[1] == {}
    assert redact_counted_series(pl.Series("t", [None], dtype=pl.String), rules=rules)[1] == {}


def test_a_frame_is_redacted_column_by_column_and_its_hits_summed(rules: RuleSet) -> None:
    texts = [t for t in _lines() if t is not None]
    frame = pl.DataFrame({"a": texts, "b": list(reversed(texts)), "n": range(len(texts))})
    got, hits = redact_frame_counted(frame, ["a", "b"], rules=rules)
    assert_frame_equal(
        got,
        frame.with_columns(
            a=redact_series(frame["a"], rules=rules), b=redact_series(frame["b"], rules=rules)
        ),
    )
    one = _hits_by_second_look(frame["a"], rules)
    assert hits == {rule_id: 2 * n for rule_id, n in one.items()}
    assert list(hits) == list(one)  # rule order
    assert sum(hits.values()) > 4 * len(FIXTURE_SECRETS)


def test_items_count_a_message_once_though_its_parts_are_redacted_too(rules: RuleSet) -> None:
    texts = [t for t in _lines() if t]
    items = pl.DataFrame(
        {
            "record_type": ["response_item"] * len(texts),
            "item_type": ["message"] * len(texts),
            "role": ["user"] * len(texts),
            "name": [None] * len(texts),
            "call_id": [None] * len(texts),
            "text": texts,
            "parts": [[{"type": "input_text", "text": t}] for t in texts],
            "payload_json": ['{"type":"message","role":"user"}'] * len(texts),
        },
        schema_overrides={"name": pl.String, "call_id": pl.String},
    )
    got, hits = redact_items(items, rules=rules)
    redacted = redact_series(pl.Series(texts), rules=rules)
    assert got["text"].to_list() == redacted.to_list()
    assert [p[0]["text"] for p in got["parts"].to_list()] == redacted.to_list()
    assert hits == _hits_by_second_look(pl.Series(texts), rules)
