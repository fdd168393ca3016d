"""Secret rules files, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): every
malformed file is refused with a message naming what is wrong, passes run in their fixed
order whatever the file's order, and each rule keeps exactly its own key and suffix."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import (
    REDACTED,
    redact_text,
    rule_hit_counts,
    secret_count_expr,
)

CUSTOM = r"""
[fragments]
key_end = '"?\s*[:=]\s*'

[[rules]]
id = "pin"
pass = "keyed"
description = "a PIN with its key kept"
regex = '(\bpin{{key_end}})[0-9]{6}'

[[rules]]
id = "dsn"
pass = "keyed"
regex = '(\bdsn://user:)[^@\s]+(@)'

[[rules]]
id = "tok"
pass = "token"
regex = '\btok_[a-z0-9]{12}\b'

[[rules]]
id = "block"
pass = "block"
regex = '-----BEGIN SECRET-----[\s\S]*?-----END SECRET-----'
"""


@pytest.fixture
def custom(tmp_path: Path) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(CUSTOM, encoding="utf-8")
    return path


def test_passes_run_block_then_token_then_keyed_whatever_the_file_order(custom: Path) -> None:
    rules = load_rules(custom)
    assert [p.name for p in rules.passes] == ["block", "token", "keyed"]
    assert rules.rule_ids == ("block", "tok", "pin", "dsn")
    assert rules.source == str(custom)
    assert rules.rules[2].description == "a PIN with its key kept"
    assert rules.rules[3].description == ""


def test_each_keyed_rule_keeps_its_own_key_and_suffix(custom: Path) -> None:
    rules = load_rules(custom)
    keyed = rules.passes[2]
    assert keyed.replacement == "${1}${2}" + REDACTED + "${3}"
    text = 'pin: 123456 and dsn://user:hunter2@db and "pin"=654321'
    assert redact_text(text, rules=rules) == (
        f'pin: {REDACTED} and dsn://user:{REDACTED}@db and "pin"={REDACTED}'
    )


def test_a_token_and_a_block_are_replaced_whole(custom: Path) -> None:
    rules = load_rules(custom)
    assert rules.passes[1].replacement == REDACTED
    text = "use tok_abcdef123456 now\n-----BEGIN SECRET-----\nxyz\n-----END SECRET----- done"
    assert redact_text(text, rules=rules) == f"use {REDACTED} now\n{REDACTED} done"


def test_counts_per_rule_and_leftovers_with_a_custom_file(custom: Path) -> None:
    rules = load_rules(custom)
    texts = ["pin=111111 tok_abcdef123456 tok_abcdef654321", "dsn://user:pw@h", None, "none"]
    lf = pl.LazyFrame({"text": texts})
    counts = rule_hit_counts(lf, column="text", rules=rules).collect()
    assert counts.rows() == [("tok", 2), ("pin", 1), ("dsn", 1)]
    before = pl.select(secret_count_expr(pl.lit(pl.Series(texts)), rules=rules)).to_series()
    assert before.to_list() == [3, 1, 0, 0]


def _rules_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    return path


_OK = '[[rules]]\nid = "ok"\npass = "token"\nregex = \'tok_[a-z]{9}\'\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("extra = 1\n" + _OK, r"unknown top-level keys \['extra'\]", id="top-key"),
        pytest.param("fragments = 'x'\n" + _OK, r"\[fragments\] must be a table", id="frag-table"),
        pytest.param("rules = ['x']\n", r"rules\[0\] must be a table", id="rule-table"),
        pytest.param("rules = 1\n", r"expected a non-empty \[\[rules\]\] array", id="rules-int"),
        pytest.param(
            "[[rules]]\nid = 3\npass = 'token'\nregex = 'x'\n",
            r"rules\[0\]: id must be lower-case kebab-case, got 3",
            id="id-int",
        ),
        pytest.param(
            "[[rules]]\nid = 'd'\npass = 'token'\ndescription = 1\nregex = 'tok_[a-z]{9}'\n",
            r"rule 'd': description must be a string",
            id="description",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = '   '\n",
            r"rule 'r': regex must be a non-empty string",
            id="blank-regex",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = 5\n",
            r"rule 'r': regex must be a non-empty string",
            id="regex-int",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\n",
            r"rule 'r': regex must be a non-empty string",
            id="no-regex",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = 'x{{nope}}'\n",
            r"rule 'r': unknown fragment \{\{nope\}\}",
            id="rule-fragment",
        ),
        pytest.param(
            "[fragments]\na = '{{b}}'\n" + _OK,
            r"fragment 'a': unknown fragment \{\{b\}\}",
            id="fragment-order",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = '(a)(b)(c)'\n",
            r"at most two unnamed capture groups \(1 = kept prefix, 2 = kept suffix\), "
            r"found \['1', '2', '3'\]",
            id="groups",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = '\\[REDACTED_SECRET\\]'\n",
            r"matches the empty string or already-redacted text '\[REDACTED_SECRET\]'",
            id="marker",
        ),
        pytest.param(
            "[[rules]]\nid = 'r'\npass = 'token'\nregex = 'x('\n",
            r"bad\.toml: rule 'r': regex does not compile",
            id="compile",
        ),
    ],
)
def test_a_malformed_rules_file_is_refused_saying_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _rules_file(tmp_path, text)
    with pytest.raises(ValueError, match=message) as err:
        load_rules(path)
    assert str(err.value).startswith(f"{path}: ")


def test_fragments_may_use_earlier_fragments(tmp_path: Path) -> None:
    text = "[fragments]\na = 'tok_'\nb = '{{a}}[a-z]{9}'\n" + _OK.replace("tok_[a-z]{9}", "{{b}}")
    rules = load_rules(_rules_file(tmp_path, text))
    assert rules.rules[0].pattern == "tok_[a-z]{9}"
    assert rules.any_pattern == "(?:tok_[a-z]{9})"


def test_a_secret_inside_an_earlier_passs_match_counts_once_for_that_pass(custom: Path) -> None:
    rules = load_rules(custom)
    text = "-----BEGIN SECRET-----\ntok_abcdef123456 pin=123456\n-----END SECRET----- pin=999999"
    counts = rule_hit_counts(pl.LazyFrame({"t": [text]}), column="t", rules=rules).collect()
    assert counts.rows() == [("block", 1), ("pin", 1)]
    default = load_rules()
    token = "ghp_" + "a1B2" * 9
    lf = pl.LazyFrame({"t": [f"password: {token}"]})
    assert rule_hit_counts(lf, column="t", rules=default).collect().rows() == [("github-token", 1)]


TWO_TOKENS = r"""
[[rules]]
id = "short"
pass = "token"
regex = '\bab[0-9]{3}\b'

[[rules]]
id = "long"
pass = "token"
regex = '\bxx-ab[0-9]{3}-yy\b'

[[rules]]
id = "inner"
pass = "keyed"
regex = '(\B)q[a-z]+'
"""


def test_a_span_counts_for_the_rule_that_matched_at_its_start(tmp_path: Path) -> None:
    rules = load_rules(_rules_file(tmp_path, TWO_TOKENS))
    lf = pl.LazyFrame({"t": ["see xx-ab123-yy and ab456"]})
    counts = rule_hit_counts(lf, column="t", rules=rules).collect()
    assert counts.rows() == [("short", 1), ("long", 1)]


def test_a_span_whose_match_needs_the_text_before_it_still_counts(tmp_path: Path) -> None:
    rules = load_rules(_rules_file(tmp_path, TWO_TOKENS))
    lf = pl.LazyFrame({"t": ["xqabqz"]})  # the match starts inside a word
    assert redact_text("xqabqz", rules=rules) == f"x{REDACTED}"
    assert rule_hit_counts(lf, column="t", rules=rules).collect().rows() == [("inner", 1)]


def _big(rule_id: str, pass_name: str, regex: str) -> str:
    return f"[[rules]]\nid = '{rule_id}'\npass = '{pass_name}'\nregex = '{regex}'\n"


def test_rules_that_compile_alone_but_not_together_are_refused(tmp_path: Path) -> None:
    # \w{120} compiles alone (Unicode classes are large); two of them exceed the size limit
    one_pass = _big("a", "token", r"\bxa\w{120}") + _big("b", "token", r"\bxb\w{120}")
    with pytest.raises(ValueError, match=r"pass 'token': regex does not compile: .*size limit"):
        load_rules(_rules_file(tmp_path, one_pass))
    two_passes = _big("a", "token", r"\bxa\w{120}") + _big("b", "keyed", r"(\bxb)\w{120}")
    with pytest.raises(
        ValueError, match=r"bad\.toml: combined rule set: regex does not compile: .*size limit"
    ):
        load_rules(_rules_file(tmp_path, two_passes))


def test_a_regex_matching_only_the_empty_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"rule 'r': regex matches the empty string .* ''"):
        load_rules(_rules_file(tmp_path, _big("r", "token", "^$")))


def test_a_file_with_one_pass_builds_only_that_pass(tmp_path: Path) -> None:
    rules = load_rules(_rules_file(tmp_path, _OK))
    assert [p.name for p in rules.passes] == ["token"]
    assert redact_text("hello tok_abcdefghi", rules=rules) == f"hello {REDACTED}"


def test_counts_follow_the_rule_order_not_the_text_order(custom: Path) -> None:
    rules = load_rules(custom)
    texts = ["dsn://user:pw@h pin=111111 tok_abcdef123456", "pin=222222 dsn://user:x@y"]
    for text in (texts, list(reversed(texts))):
        counts = rule_hit_counts(pl.LazyFrame({"t": text}), column="t", rules=rules).collect()
        assert counts.rows() == [("tok", 1), ("pin", 2), ("dsn", 2)]
