"""The redaction engine rewrites only what it changes, with the same result as the plain chain.

``redact_series`` skips rows no step can change (no escape to decode, no rule match, no key
word). These tests hold it to the plain definition: every step applied to every row, in order.
"""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

from memkiln.io.rules import load_rules
from memkiln.transforms import redact
from memkiln.transforms.redact import (
    REDACTED,
    RuleSet,
    redact_series,
    rule_hit_counts,
    unescape_series,
)
from memkiln.transforms.redact_context import context_hits, redact_context_series
from memkiln.transforms.redact_encoded import redact_encoded_with_hits
from memkiln.transforms.redact_source import redact_source_series, source_hits
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
    series = _plain_alone(series, rules)[0]
    if rules.external:
        series = redact_source_series(series, rules.external, REDACTED)
    if rules.context:
        series = redact_context_series(series, rules.context, REDACTED)
    return _plain_last_steps(series, rules)[0]


def _plain_alone(series: pl.Series, rules: RuleSet) -> tuple[pl.Series, dict[str, int]]:
    """The rules that run alone, right after the passes, over every row; their hits."""
    hits: dict[str, int] = {}
    for rule, alone in rules.alone:  # every row; the literals only choose rows
        n = series.str.count_matches(alone.pattern).sum()
        if n:
            hits[rule.id] = n
        series = series.str.replace_all(alone.pattern, alone.replacement)
    return series, hits


def _plain_last_steps(series: pl.Series, rules: RuleSet) -> tuple[pl.Series, dict[str, int]]:
    """The encoded pass (a decoded run redacted by every other step), then the ``after``
    rules over every row until they match nothing; the hits of both."""
    hits: dict[str, int] = {}
    if rules.encoded:
        inner = dataclasses.replace(rules, encoded=())
        series, hits = redact_encoded_with_hits(
            series, rules.encoded, REDACTED, lambda s: _plain_redact(s, inner)
        )
    while rules.after is not None and series.str.contains(rules.after.pattern).any():
        spans = series.str.extract_all(rules.after.pattern).explode().drop_nulls()
        for rule in rules.after_rules:  # one rule today: each span is its
            hits[rule.id] = hits.get(rule.id, 0) + spans.str.contains(rule.pattern).sum()
        series = series.str.replace_all(rules.after.pattern, rules.after.replacement)
    return series, hits


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


def _reference_hit_counts(lf: pl.LazyFrame, *, column: str, rules: RuleSet) -> pl.LazyFrame:
    """rule_hit_counts as it was (one Polars plan over every rule): the definition."""
    text = pl.col("text")
    steps = lf.select(text=pl.col(column)).filter(text.str.contains(rules.any_pattern))
    for i, rule_pass in enumerate(rules.passes):
        spans_of_pass = text.str.extract_all(rule_pass.pattern).alias(rule_pass.name)
        if i + 1 < len(rules.passes):  # the next pass sees this one's output
            steps = steps.with_columns(
                spans_of_pass, text.str.replace_all(rule_pass.pattern, rule_pass.replacement)
            )
        else:
            steps = steps.with_columns(spans_of_pass)
    spans = (
        steps.select(rule_pass.name for rule_pass in rules.passes)
        .unpivot(variable_name="pass_name", value_name="span")
        .explode("span")
        .drop_nulls("span")
    )
    span = pl.col("span")
    in_pass = [pl.col("pass_name") == rule.pass_name for rule in rules.rules]
    rule_id = pl.coalesce(
        *(
            pl.when(here & span.str.contains(f"^(?:{rule.pattern})")).then(pl.lit(rule.id))
            for rule, here in zip(rules.rules, in_pass, strict=True)
        ),
        # a rule whose match depends on the text around the span: the first that matches inside
        *(
            pl.when(here & span.str.contains(rule.pattern)).then(pl.lit(rule.id))
            for rule, here in zip(rules.rules, in_pass, strict=True)
        ),
    )
    counted = spans.select(rule_id=rule_id).drop_nulls().group_by("rule_id").agg(hits=pl.len())
    if rules.context or rules.external or rules.encoded or rules.alone or rules.after:
        after = lf.select(text=pl.col(column))
        for rule_pass in rules.passes:
            after = after.with_columns(
                text.str.replace_all(rule_pass.pattern, rule_pass.replacement)
            )
        context = rules.context

        def count_context(frame: pl.DataFrame) -> pl.DataFrame:
            text, found = _plain_alone(frame["text"].drop_nulls(), rules)
            if rules.external:
                found |= source_hits(text, rules.external, REDACTED)
                text = redact_source_series(text, rules.external, REDACTED)
            found |= context_hits(text, context, REDACTED)
            text = redact_context_series(text, context, REDACTED)
            found |= _plain_last_steps(text, rules)[1]
            return pl.DataFrame(
                {"rule_id": list(found), "hits": list(found.values())},
                schema={"rule_id": pl.String, "hits": pl.UInt32},
            )

        counted = pl.concat(
            [
                counted.cast({"hits": pl.UInt32}),
                after.map_batches(count_context, schema={"rule_id": pl.String, "hits": pl.UInt32}),
            ]
        )
    order = pl.LazyFrame(
        {"rule_id": list(rules.rule_ids), "order": list(range(len(rules.rule_ids)))},
        schema={"rule_id": pl.String, "order": pl.Int64},
    )
    return (
        counted.group_by("rule_id")
        .agg(hits=pl.col("hits").sum().cast(pl.Int64))
        .join(order, on="rule_id")
        .sort("order")
        .drop("order")
    )


def test_rule_hit_counts_equal_the_one_plan_definition(rules: RuleSet) -> None:
    texts = _texts()
    texts += [" ".join(t for t in texts[i : i + 7] if t) for i in range(0, len(texts), 7)]
    frame = pl.LazyFrame({"text": texts}, schema={"text": pl.String})
    got = rule_hit_counts(frame, column="text", rules=rules).collect()
    expected = _reference_hit_counts(frame, column="text", rules=rules).collect()
    assert_frame_equal(got, expected)
    assert got.height > 20 and got["hits"].sum() > 2 * len(FIXTURE_SECRETS)
