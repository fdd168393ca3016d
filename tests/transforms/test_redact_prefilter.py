"""Every rule in one Hyperscan prefilter: the translation of Rust regex syntax matches at least
what the rule does, the database holds every rule, and redaction with the prefilter is the
redaction without it (texts and hit counts) on the session corpus, the fixtures and the public
examples."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import hyperscan
import polars as pl
import pytest

from memkiln.io import rules as rules_io
from memkiln.io.rules import load_rules
from memkiln.transforms import redact_prefilter
from memkiln.transforms.hs_syntax import Untranslatable, to_hyperscan
from memkiln.transforms.redact import RuleSet, plan_fits, plan_prefilter, redact_counted_series
from tests.transforms.test_literal_scan import _corpus_lines, _texts

ROLLOUTS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "rollouts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "secrets"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules(prefilter=True)


def test_ingest_s_rules_have_none_and_memkiln_redact_s_get_theirs() -> None:
    plain = load_rules()
    assert plain.prefilter is None
    assert rules_io.prefiltered(plain) is load_rules(prefilter=True)
    assert rules_io.prefiltered(plain).prefilter is not None


def _matches(expression: str, text: str) -> bool:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(
        expressions=[expression.encode()],
        ids=[0],
        elements=1,
        flags=[hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_SINGLEMATCH],
    )
    found: list[int] = []
    database.scan(text.encode(), lambda i, *_: found.append(i), scratch=hyperscan.Scratch(database))
    return bool(found)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"(?-u:\b)ghp_[A-Za-z0-9]{4}", "xghp_abcd"),  # the boundary is dropped: wider
        (r"(?i)sk-[a-z]{3}", "\u017fK-abc"),  # Rust folds s to the long s, k to Kelvin
        (r"(?i)[a-z]{3}key", "\u212a\u017fxKEY"),  # a bracket under (?i) folds too
        (r"\w{2}=", "é\u00e8="),  # Unicode \w in Rust: every non-ASCII character here
        (r"[[^ \t]--[0-9]]{3}!", "a1b!"),  # A--B is read as A
        (r"[a-c[x-z]]{2}\.", "ay."),  # a bracket in a bracket
        (r"(?i:token)\s*[:=]\s*\x{2192}", "TOKEN = \u2192"),
        (r"^(?m)a.+?b$", "xx a--b yy"),
        (r"(?P<v>x{2,3}?)y", "xxy"),
        (r"\p{L}z", "éz"),
        (r"[^\d]{2}", "ab"),
    ],
)
def test_the_translation_matches_what_the_rust_pattern_matches(pattern: str, text: str) -> None:
    assert _matches(to_hyperscan(pattern), text)


def test_a_negated_bracket_keeps_its_meaning_and_a_widened_one_takes_any_character() -> None:
    assert not _matches(to_hyperscan(r"x[^0-9]y"), "x5y")
    # the complement of a set operation cannot be narrowed safely: any character
    assert _matches(to_hyperscan(r"x[^[a-z]--[b]]y"), "xby")


def test_syntax_it_cannot_read_is_said() -> None:
    with pytest.raises(Untranslatable):
        to_hyperscan(r"(?x) a b")
    with pytest.raises(Untranslatable):
        to_hyperscan(r"a\qb")


def test_every_rule_translates_and_hyperscan_takes_every_expression(rules: RuleSet) -> None:
    plan = plan_prefilter(rules)
    assert rules.external is not None
    kinds = len(rules.rules) + len(rules.alone) + len(rules.after_rules)
    kinds += len(rules.external.rules) + len(rules.external.keywords)
    kinds += sum(len(rule.row_filters()) for rule in rules.context) + len(rules.encoded)
    assert len(plan.expressions) == kinds > 800
    _, refused = redact_prefilter.compile_database(plan)
    assert refused == ()


def _every_pattern(rules: RuleSet, plan: redact_prefilter.Plan) -> list[tuple[frozenset[int], str]]:
    assert rules.external is not None
    pairs = [(i, r.pattern) for i, r in zip(sorted(plan.pass_ids), rules.rules, strict=True)]
    pairs += [(i, r.pattern) for i, (r, _) in zip(plan.alone_ids, rules.alone, strict=True)]
    pairs += [(i, r.pattern) for i, r in zip(plan.source_ids, rules.external.rules, strict=True)]
    pairs += [(i, r.pattern) for i, r in zip(plan.encoded_ids, rules.encoded, strict=True)]
    found = [(frozenset((i,)), pattern) for i, pattern in pairs]
    # a context rule's row filter: any of its pieces (one per key word when it has many)
    context = zip(plan.context_ids, rules.context, strict=True)
    return found + [(ids, rule.row_filter) for ids, rule in context]


def _examples() -> list[str]:
    lines = (FIXTURES / "public_examples.jsonl").read_text(encoding="utf-8").splitlines()[1:]
    return [json.loads(line)["text"] for line in lines]


def test_every_row_a_rule_matches_is_a_row_the_prefilter_reports_for_it(rules: RuleSet) -> None:
    prefilter = rules.prefilter
    assert prefilter is not None
    texts = [t for t in _texts() if t] + _examples()
    series = pl.Series("text", texts, dtype=pl.String)
    scan = prefilter.scan(series)
    plan = prefilter.plan
    assert sorted(plan.pass_ids) == list(range(len(rules.rules)))  # ids in rule order
    checked = 0
    for expression_ids, pattern in _every_pattern(rules, plan):
        matched = set(series.str.contains(pattern).arg_true().to_list())
        reported = set(scan.rows(expression_ids))
        assert matched <= reported, (pattern, sorted(matched - reported)[:3])
        checked += len(matched)
    assert checked > 1000


def test_a_rule_of_hundreds_of_key_words_is_scanned_in_pieces_that_report_few_rows(
    rules: RuleSet,
) -> None:
    prefilter = rules.prefilter
    assert prefilter is not None
    many = [i for i, r in enumerate(rules.context) if len(r.prefilter) > 64]
    assert many, "a context rule with many key words (provider names)"
    texts = [t for t in _texts() if t] + _examples()
    series = pl.Series("text", texts, dtype=pl.String)
    scan = prefilter.scan(series)
    for index in many:
        rule = rules.context[index]
        assert len(prefilter.plan.context_ids[index]) == len(rule.prefilter)
        reported = scan.rows(prefilter.plan.context_ids[index])
        matched = series.str.contains(rule.row_filter).sum()
        # one alternation of every name was widened by Hyperscan to nearly every row
        assert matched <= len(reported) < len(series) // 4, (matched, len(reported))


def _both(series: pl.Series, rules: RuleSet, *, unescape: bool) -> None:
    assert rules.prefilter is not None
    fast = redact_counted_series(series, rules=rules, unescape=unescape)
    slow = redact_counted_series(
        series, rules=dataclasses.replace(rules, prefilter=None), unescape=unescape
    )
    assert fast[1] == slow[1]
    assert sum(fast[1].values()) > 0
    assert fast[0].to_list() == slow[0].to_list()


@pytest.mark.corpus  # the fixtures and every public example, twice
def test_with_and_without_the_prefilter_the_fixtures_are_redacted_alike(rules: RuleSet) -> None:
    series = pl.Series("text", [*_texts(), *_examples()], dtype=pl.String)
    _both(series, rules, unescape=True)
    _both(series, rules, unescape=False)


@pytest.mark.corpus
@pytest.mark.skipif(not ROLLOUTS.is_dir(), reason="the shared session corpus is not here")
def test_with_and_without_the_prefilter_the_corpus_is_redacted_alike(rules: RuleSet) -> None:
    series = pl.Series("text", _corpus_lines(), dtype=pl.String)
    assert len(series) > 10_000
    _both(series, rules, unescape=True)


def test_a_prefilter_made_for_other_rules_is_not_used(rules: RuleSet) -> None:
    assert rules.prefilter is not None
    fewer = dataclasses.replace(rules, context=())
    assert not plan_fits(rules.prefilter.plan, fewer)
    text = pl.Series("text", ["token: Xk29Ls0qPzR7vWm3"], dtype=pl.String)
    # the context rule left out: its id in the plan must not stand for another rule
    assert redact_counted_series(text, rules=fewer)[0].to_list() == (
        redact_counted_series(text, rules=dataclasses.replace(fewer, prefilter=None))[0].to_list()
    )


def test_the_rule_set_with_its_prefilter_pickles_for_a_worker(rules: RuleSet) -> None:
    copy = pickle.loads(pickle.dumps(rules))
    assert copy.prefilter is not None and plan_fits(copy.prefilter.plan, copy)
    text = pl.Series("text", ['{"password": "hunter2-Xk29Ls0q"}'], dtype=pl.String)
    redacted, hits = redact_counted_series(text, rules=copy)
    assert hits and (redacted.to_list(), hits) == _as_lists(
        redact_counted_series(text, rules=rules)
    )


def _as_lists(pair: tuple[pl.Series, dict[str, int]]) -> tuple[list[str | None], dict[str, int]]:
    return pair[0].to_list(), pair[1]


def test_a_damaged_cache_is_compiled_again_and_without_hyperscan_there_is_none(
    rules: RuleSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bare = dataclasses.replace(rules, prefilter=None)
    plan = plan_prefilter(bare)
    cached = tmp_path / "memkiln" / f"prefilter-{rules_io._fingerprint(plan)}.hsdb"
    cached.parent.mkdir(parents=True)
    body = b"not a database"  # whole (its checksum right) but not Hyperscan's
    cached.write_bytes(hashlib.sha256(body).digest() + body)
    assert rules_io._load(cached) == body
    assert rules_io.with_prefilter(bare).prefilter is not None
    assert rules_io._load(cached) is not None  # stored whole this time
    assert rules_io.with_prefilter(bare).prefilter is not None  # and read back
    monkeypatch.setattr(redact_prefilter, "_hyperscan", None)
    assert rules_io.with_prefilter(bare).prefilter is None


def test_the_packaged_rules_come_from_their_cache_and_a_damaged_one_is_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = rules_io._packaged.__wrapped__()  # parsed, stored
    [stored] = (tmp_path / "memkiln").glob("rules-*.pickle")
    again = rules_io._packaged.__wrapped__()  # read back
    assert again.rule_ids == first.rule_ids and again.prefilter is not None
    body = b"not a pickle"
    stored.write_bytes(hashlib.sha256(body).digest() + body)
    assert rules_io._packaged.__wrapped__().rule_ids == first.rule_ids
    assert rules_io._load(stored) != body  # stored again, whole
