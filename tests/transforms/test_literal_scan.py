"""Hyperscan finds the rows holding a key word, with the regex as the fallback: both give the
same rows, and redaction the same text, on every line of the session corpus and the fixtures."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms import literal_scan
from memkiln.transforms.redact import RuleSet, redact_series
from memkiln.transforms.redact_source import SourceRules
from tests.transforms.test_redact import FIXTURE_SECRETS, ORDINARY, PLACEMENTS

ROLLOUTS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "rollouts"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _source(rules: RuleSet) -> SourceRules:
    assert rules.external is not None
    return rules.external


def _texts() -> list[str | None]:
    texts: list[str | None] = [None, "", *ORDINARY]
    for fx in FIXTURE_SECRETS:
        texts += [fx.text, fx.text.upper(), fx.text.lower()]
        texts += [build(fx) for build in PLACEMENTS.values()]
    return texts


def _corpus_lines() -> list[str]:
    files = sorted(ROLLOUTS.rglob("*.jsonl"))
    return [line for f in files for line in f.read_text("utf-8", "replace").splitlines()]


def test_hyperscan_is_installed_and_answers() -> None:
    assert literal_scan.available()
    held = literal_scan.rows_holding(pl.Series(["a TOKEN here", "nothing", None]), ("token",))
    assert held is not None and held.to_list() == [True, False, False]


def test_both_engines_find_the_same_rows_in_the_fixtures(rules: RuleSet) -> None:
    series = pl.Series("text", _texts(), dtype=pl.String)
    source = _source(rules)
    fast = source.keyword_rows(series)
    assert fast.sum() > len(FIXTURE_SECRETS)
    assert fast.to_list() == source.keyword_rows(series, multi_literal=False).to_list()


@pytest.mark.skipif(not ROLLOUTS.is_dir(), reason="the shared session corpus is not here")
def test_both_engines_find_the_same_rows_and_redact_the_same_on_the_corpus(
    rules: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    series = pl.Series("text", _corpus_lines(), dtype=pl.String)
    assert len(series) > 10_000
    source = _source(rules)
    fast_rows = source.keyword_rows(series)
    assert fast_rows.to_list() == source.keyword_rows(series, multi_literal=False).to_list()
    fast = redact_series(series, rules=rules)
    monkeypatch.setattr(literal_scan, "_hyperscan", None)  # the wheel missing
    assert literal_scan.rows_holding(series, source.keywords) is None
    slow = redact_series(series, rules=rules)
    assert (fast != series).sum() > 0
    assert fast.to_list() == slow.to_list()


def test_literals_that_are_not_ascii_are_left_to_the_regex() -> None:
    assert literal_scan.rows_holding(pl.Series(["clé"]), ("clé",)) is None
    held = literal_scan.rows_holding(pl.Series(["a+b", "a-b", "A+B"]), ("a+b",))
    assert held is not None and held.to_list() == [True, False, True]
