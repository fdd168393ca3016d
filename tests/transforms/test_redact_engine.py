"""The redaction engine rewrites only what it changes, with the same result as the plain chain.

``redact_series`` skips rows no step can change (no escape to decode, no rule match, no key
word). These tests hold it to the plain definition: every step applied to every row, in order.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_series_equal

from memkiln.io.rules import load_rules
from memkiln.transforms import redact
from memkiln.transforms.redact import REDACTED, RuleSet, redact_series, unescape_series
from memkiln.transforms.redact_context import redact_context_series
from memkiln.transforms.redact_source import redact_source_series
from tests.transforms.test_redact import FIXTURE_SECRETS, ORDINARY, PLACEMENTS


def _plain_unescape(series: pl.Series) -> pl.Series:
    return series.str.replace_all(redact._ESCAPED_ASCII, r"\${1}").str.replace_many(
        redact._ASCII_ESCAPES, redact._ASCII_CHARS, ascii_case_insensitive=True
    )


def _plain_redact(series: pl.Series, rules: RuleSet, *, unescape: bool = True) -> pl.Series:
    """Every step over every row: what redaction is defined as."""
    if unescape:
        series = _plain_unescape(series)
    for rule_pass in rules.passes:
        series = series.str.replace_all(rule_pass.pattern, rule_pass.replacement)
    if rules.external:
        series = redact_source_series(series, rules.external, REDACTED)
    if rules.context:
        series = redact_context_series(series, rules.context, REDACTED)
    return series


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _texts() -> list[str | None]:
    """Lines and decoded strings of every placement of every fixture secret, ordinary text,
    escapes of every kind, nulls and empty strings."""
    texts: list[str | None] = [None, "", *ORDINARY]
    for fx in FIXTURE_SECRETS:
        for build in PLACEMENTS.values():
            line = build(fx)
            texts.append(line)
            texts.append(json.dumps(json.loads(line), ensure_ascii=True))  # \uXXXX everywhere
        texts += [fx.text, fx.secret, json.dumps(fx.text)[1:-1]]
        escaped = "".join(f"\\u{ord(c):04x}" if c.isalpha() else c for c in fx.text)
        texts += [escaped, escaped.replace("\\", "\\\\"), escaped.upper()]
    texts += ["a\\/b", "\\\\\\/x", "\\U0041KIA", "no escapes here", "\\n\\t\\\\", "x" * 5000]
    return texts


def test_redact_series_equals_every_step_over_every_row(rules: RuleSet) -> None:
    series = pl.Series("text", _texts(), dtype=pl.String)
    expected = _plain_redact(series, rules)
    assert_series_equal(redact_series(series, rules=rules), expected)
    assert (expected != series).sum() > len(FIXTURE_SECRETS)  # it does redact


def test_redact_series_without_unescape_equals_the_plain_passes(rules: RuleSet) -> None:
    series = pl.Series("text", _texts(), dtype=pl.String)
    assert_series_equal(
        redact_series(series, rules=rules, unescape=False),
        _plain_redact(series, rules, unescape=False),
    )


def test_unescape_series_equals_the_plain_unescape_and_leaves_other_rows_alone() -> None:
    texts = _texts()
    series = pl.Series("text", texts, dtype=pl.String)
    out = unescape_series(series)
    assert_series_equal(out, _plain_unescape(series))
    assert out.to_list()[: 2 + len(ORDINARY)] == texts[: 2 + len(ORDINARY)]


def test_all_null_and_one_row_series_pass_through(rules: RuleSet) -> None:
    nulls = pl.Series("text", [None, None], dtype=pl.String)
    assert_series_equal(redact_series(nulls, rules=rules), nulls)
    secret = FIXTURE_SECRETS[0]
    one = pl.Series("text", [secret.text], dtype=pl.String)
    assert secret.secret not in redact_series(one, rules=rules).item()


def test_the_key_word_regex_finds_the_rows_contains_any_finds(rules: RuleSet) -> None:
    source = rules.external
    assert source is not None and source.keyword_pattern
    keywords = list(source.keywords)
    texts: list[str | None] = [None, "", "nothing to see", "\u212a\u017f"]  # Kelvin sign, long s
    for i, k in enumerate(keywords):
        spelled = "".join(c.upper() if (i + j) % 2 else c for j, c in enumerate(k))
        texts += [
            f"x {spelled} y",
            k.upper(),
            k[:-1],
            k.replace("k", "\u212a").replace("s", "\u017f"),
        ]
    series = pl.Series("t", texts, dtype=pl.String)
    by_automaton = series.str.contains_any(keywords, ascii_case_insensitive=True).fill_null(False)
    assert_series_equal(source.keyword_rows(series), by_automaton, check_names=False)
    assert by_automaton.sum() >= 2 * len(keywords)


def test_key_words_that_are_not_ascii_fall_back_to_the_automaton() -> None:
    from memkiln.transforms.redact_source import keyword_pattern

    assert keyword_pattern(["caf\u00e9"]) == "" and keyword_pattern([]) == ""
    assert keyword_pattern(["a.b-c", "x y"]) == "(?i-u:a\\x{2e}b\\x{2d}c|x\\x{20}y)"


def test_the_rows_unescape_rewrites_are_exactly_those_holding_an_escape_it_decodes() -> None:
    decoded = [*redact._ASCII_ESCAPES, *(e.upper() for e in redact._ASCII_ESCAPES)]
    kept = ["\\u001b[32m", "\\u0022", "\\u005c", "\\u00e9", "\\u2192", "u0041", "\\n"]
    series = pl.Series("t", [f"x{e}y" for e in decoded + kept], dtype=pl.String)
    rows = series.str.contains(redact._UNESCAPE_ROWS).to_list()
    assert rows == [True] * len(decoded) + [False] * len(kept)
    changed = (_plain_unescape(series) != series).to_list()
    assert changed == rows
