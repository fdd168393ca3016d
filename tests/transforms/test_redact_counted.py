"""Hits counted while redacting equal the hits counted by a second look at the changed texts.

The line pass of ingest counts the replaced spans per rule as it redacts
(``redact_counted_series``, ``clean_lines_counted``) instead of redacting the changed lines a
second time (``rule_hit_counts`` of ``secrets_in``); both must give the same text, flags and
counts.
"""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

from memkiln.io.rules import load_rules
from memkiln.transforms.lines import clean_lines, clean_lines_counted
from memkiln.transforms.redact import (
    RuleSet,
    redact_counted_series,
    redact_flagged_series,
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
    redacted = redact_flagged_series(texts, rules=rules)[0]
    changed = pl.LazyFrame({"t": texts.filter((redacted != texts).fill_null(False))})
    return dict(rule_hit_counts(changed, column="t", rules=rules).collect().iter_rows())


def test_hits_counted_while_redacting_equal_a_second_look_at_the_changed_texts(
    rules: RuleSet,
) -> None:
    texts = pl.Series("t", _lines(), dtype=pl.String)
    text, flags, hits = redact_counted_series(texts, rules=rules)
    expected_text, expected_flags = redact_flagged_series(texts, rules=rules)
    assert_series_equal(text, expected_text)
    assert_series_equal(flags, expected_flags)
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
    assert redact_counted_series(texts, rules=rules)[2] == {}
    assert redact_counted_series(pl.Series("t", [None], dtype=pl.String), rules=rules)[2] == {}


def test_clean_lines_counted_equals_clean_lines_and_the_hits_of_secrets_in(
    rules: RuleSet,
) -> None:
    lines = [t for t in _lines() if t is not None]
    frame = pl.DataFrame(
        {"line": lines, "lossy": [None] * len(lines)},
        schema={"line": pl.String, "lossy": pl.String},
    )
    expected = clean_lines(frame.lazy(), rules=rules).collect()
    changed = expected.lazy().filter(pl.col("secrets_in").is_not_null())
    expected_hits = rule_hit_counts(changed, column="secrets_in", rules=rules).collect()
    got, hits = clean_lines_counted(frame, rules=rules)
    assert_frame_equal(got, expected.drop("secrets_in"))
    assert list(hits.items()) == list(expected_hits.iter_rows())
    assert hits
