"""The external rule set's pass (Betterleaks' rules in memkiln's engine)."""

from __future__ import annotations

import json
import random
import string

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import REDACTED, redact_text, rule_hit_counts
from memkiln.transforms.redact_source import (
    parse_betterleaks,
    polars_pattern,
    redact_source_series,
    source_hits,
)

# A small configuration in Betterleaks' format (gitleaks TOML): the shapes parse_betterleaks reads
CONFIG = r"""
title = "test"

[[rules]]
id = "acme-token"
regex = '''\b(acme_[a-z0-9]{24})\b'''
keywords = ["acme_"]
filter = '''
entropy(finding["secret"]) <= 3.0
|| matchesAny(finding["secret"], ["EXAMPLE"])
'''

[[rules]]
id = "widget-key"
regex = '''(?i)widget[\w.-]{0,10}[\s'"]{0,3}[:=][\s'"]{0,3}([\w]{20})'''
keywords = ["widget"]
filter = '''entropy(finding["secret"]) < 3.5 || tokenRatio(finding["secret"]) >= 2.5'''

[[rules]]
id = "helper"
regex = '''helper_[0-9]+'''
keywords = ["helper_"]
skipReport = true

[[rules]]
id = "odd-filter"
regex = '''odd_[0-9]+'''
keywords = ["odd_"]
filter = '''containsAny(finding["secret"], ["x"])'''

[[rules]]
id = "no-keywords"
regex = '''nokw_[0-9]+'''
"""


def _rand(alphabet: str, n: int, seed: str) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


ACME = "acme_" + _rand(string.ascii_lowercase + string.digits, 24, "acme")
WIDGET = _rand(string.ascii_letters + string.digits, 20, "widget")


@pytest.fixture(scope="module")
def source():  # type: ignore[no-untyped-def]
    return parse_betterleaks(CONFIG, name="test")


def test_go_classes_become_ascii_classes_for_the_fast_engine() -> None:
    assert polars_pattern(r"x\b(ab\w{3})\b") == r"x(?-u:\b)(ab[0-9A-Za-z_]{3})(?-u:\b)"
    # a leading \b may also follow a JSON \n escape or an ANSI colour code
    assert polars_pattern(r"\b(ab)").endswith(r"|\\+[nrt]|(?:\x1b|\\+u001[bB])\[[0-9;]*m)(ab)")
    assert polars_pattern(r"[\w.-]{0,5}[^\s\\]\S\d") == (
        r"[0-9A-Za-z_.-]{0,5}[^\t\n\f\r \\][^\t\n\f\r ][0-9]"
    )
    assert polars_pattern(r"\\b[]\d]") == r"\\b[]0-9]"


def test_rules_without_keywords_or_with_filters_memkiln_cannot_read_are_left_out(source) -> None:  # type: ignore[no-untyped-def]
    assert source.rule_ids == ("betterleaks:acme-token", "betterleaks:widget-key")
    assert set(source.skipped) == {"helper", "odd-filter", "no-keywords"}
    acme, widget = source.rules
    assert (acme.entropy_floor, acme.inclusive) == (3.0, False)  # <= 3.0 drops: > 3.0 passes
    assert (widget.entropy_floor, widget.inclusive) == (3.5, True)  # < 3.5 drops
    assert source.by_keyword == {"acme_": (0,), "widget": (1,)}


def test_secrets_are_replaced_and_hits_counted_per_rule(source) -> None:  # type: ignore[no-untyped-def]
    series = pl.Series([f"use {ACME} now", f'WIDGET_KEY = "{WIDGET}"', "no secret", None, ACME])
    out = redact_source_series(series, source, REDACTED)
    assert out.to_list() == [
        f"use {REDACTED} now", f'WIDGET_KEY = "{REDACTED}"', "no secret", None, REDACTED,
    ]  # fmt: skip
    assert source_hits(series, source, REDACTED) == {
        "betterleaks:acme-token": 2,
        "betterleaks:widget-key": 1,
    }


def test_low_entropy_values_and_values_that_would_break_json_stay(source) -> None:  # type: ignore[no-untyped-def]
    texts = ["use acme_aaaaaaaaaaaaaaaaaaaaaaaa now", "widget = aaaaaaaaaabbbbbbbbbb"]
    assert redact_source_series(pl.Series(texts), source, REDACTED).to_list() == texts


def test_a_redacted_json_line_stays_valid_json_at_any_escape_depth(source) -> None:  # type: ignore[no-untyped-def]
    inner = json.dumps({"cmd": f"export WIDGET={WIDGET}; curl -H 'x: {ACME}'"})
    lines = [
        json.dumps({"text": f"widget: {WIDGET}\n{ACME}"}),
        json.dumps({"arguments": inner}),
        json.dumps({"arguments": json.dumps({"a": inner})}),
        json.dumps({"text": f"\n{ACME}\t{ACME}"}),
    ]
    out = redact_source_series(pl.Series(lines), source, REDACTED).to_list()
    for line in out:
        json.loads(line)
        assert ACME not in line and ACME not in json.dumps(json.loads(line))
    assert WIDGET not in out[0]


def test_the_packaged_rule_set_runs_betterleaks_rules_after_memkilns_own() -> None:
    rules = load_rules()
    assert rules.external is not None and len(rules.external.rules) > 300
    assert rules.external.name.startswith("betterleaks ")
    # a PlanetScale token: memkiln has no rule of its own for it, Betterleaks has
    key = "pscale_tkn_" + _rand(string.ascii_letters + string.digits, 43, "planetscale")
    text = f'{{"db": "{key}"}}'
    assert redact_text(text, rules=rules) == f'{{"db": "{REDACTED}"}}'
    counts = dict(
        rule_hit_counts(pl.LazyFrame({"t": [f"x {key}"]}), column="t", rules=rules)
        .collect()
        .iter_rows()
    )
    assert counts == {"betterleaks:planetscale-api-token": 1}


GENERIC = r"""
[[rules]]
id = "generic-api-key"
regex = '''(?i)(?:key|token|a11y)(?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|:)[\s'"]{0,5}([\w.=-]{10,150})'''
keywords = ["key", "token", "a11y"]
filter = '''entropy(finding["secret"]) <= 3.0'''
"""


def test_gated_generic_rules_pass_memkilns_benign_gate_and_replace_only_where_found() -> None:
    gate = load_rules().context[0]
    source = parse_betterleaks(GENERIC, name="t", gated=["generic-api-key"], gate=gate)
    assert source.rules[0].gated
    benign = [
        "Idempotency-Key: 1cd6d401-34da-41ec-9f3f-297b14a402c7",
        "props: { disableKeyboardA11y: disableKeyboardA11y }",
        "max_tokens: 4096000000",
    ]
    assert redact_source_series(pl.Series(benign), source, REDACTED).to_list() == benign
    secret = _rand(string.ascii_letters + string.digits, 32, "generic")
    texts = [f"access_token: {secret}", f"echo {secret}"]
    out = redact_source_series(pl.Series(texts), source, REDACTED).to_list()
    # replaced where the rule found it; the same text elsewhere is another rule's business
    assert out == [f"access_token: {REDACTED}", f"echo {secret}"]
    # without the gate the same rule takes the UUID after a bare key
    ungated = parse_betterleaks(GENERIC, name="t")
    assert redact_source_series(pl.Series(benign[:1]), ungated, REDACTED).to_list() != benign[:1]
