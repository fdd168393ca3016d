"""Secrets found by an external, maintained rule set (Betterleaks'): the source pass.

Betterleaks' default configuration (a gitleaks-format TOML) gives, per provider rule, a regex
(Go RE2 syntax, which Rust's ``regex`` reads with one change: ``\\b`` becomes ``(?-u:\\b)``),
literal key words that every match contains (lower case, matched case-insensitively) and a
filter, mostly an entropy floor for the secret. memkiln runs those rules in its own vectorized
engine, on a batch of rows at a time:

1. one Aho-Corasick pass (``str.contains_any``) over every key word of every rule keeps the
   candidate rows; one ``str.extract_many`` lists which key words each candidate holds (the
   few rules with a key word sessions are full of, ``key`` or ``test_``, get a
   ``str.contains_any`` pass of their own instead);
2. each rule's regex runs only on the candidate rows that hold one of its key words
   (``str.extract_all``); its secret is the first non-empty capture group, else the match;
3. the gate runs once per distinct secret (few): the rule's entropy floor, a length of 8 to
   1,000, and none of the characters that would let a replacement break a JSON line (a quote,
   a backslash, a bracket, a blank);
4. the confirmed secrets (for generic rules: the matches, their secret replaced) are
   replaced in the candidate rows with one ``str.replace_many``.

A secret that begins with an escape letter (``n``, ``t``, ``u0041``...) keeps it, so a JSON
escape before it is never cut in two: a valid JSON line stays valid.

Which filters are read: ``entropy(finding["secret"]) < N`` and ``<= N``, alone or followed by
``|| tokenRatio(...) >= M`` (a measure memkiln cannot compute; the entropy floor alone is
applied). A rule with any other filter, no key word, ``skipReport`` or a regex Polars cannot
compile is left out and counted in :attr:`SourceRules.skipped`.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from memkiln.transforms.literal_scan import rows_holding
from memkiln.transforms.redact_context import ContextRule, entropy

__all__ = [
    "SourceRule",
    "SourceRules",
    "keyword_pattern",
    "parse_betterleaks",
    "redact_source_series",
    "redact_source_with_hits",
    "source_hits",
]

ID_PREFIX = "betterleaks:"
MIN_SECRET_LEN = 8
MAX_SECRET_LEN = 1000
# ``entropy(secret) < N`` or ``<= N``, alone or first of ``||`` alternatives (more reasons to
# drop a finding: example values, a token ratio); the entropy floor is what memkiln applies
_FILTER = re.compile(
    r'^entropy\(finding\["secret"\]\)\s*(<=|<)\s*([0-9]+(?:\.[0-9]+)?)\s*(?:$|\|\|)'
)
# what a secret may not contain: JSON syntax, blanks, brackets (the marker), control characters
_UNSAFE = re.compile(r'["\\\[\]\s\x00-\x1f]')
# Key words that coding sessions are full of (measured on the synthetic archive and the session
# corpus): a rule with one of them is routed by its own contains_any pass, not by the per-row
# listing of key words, whose cost grows with the number of occurrences.
COMMON_KEYWORDS = frozenset(
    {"access", "api", "auth", "credential", "creds", "key", "secret", "token", "test_",
     "crates", "eyj", "curl", "password", "storage", "http", "http://", "https://", "box_"}
)  # fmt: skip
_ESCAPE_HEAD = re.compile(r"u[0-9A-Fa-f]{4}|[bfnrtu/]")


@dataclass(frozen=True)
class SourceRule:
    """One external rule, ready for Polars."""

    id: str  # ``betterleaks:<rule id>``
    pattern: str
    keywords: tuple[str, ...]  # lower case
    entropy_floor: float  # the secret's entropy must be above (or at least, see inclusive)
    inclusive: bool  # True: entropy >= floor passes (the filter was ``< N``)
    gated: bool = False  # a generic rule: its secrets must pass memkiln's key-word gate too

    def passes(self, secret: str) -> bool:
        if not MIN_SECRET_LEN <= len(secret) <= MAX_SECRET_LEN or _UNSAFE.search(secret):
            return False
        value = entropy(secret)
        return value >= self.entropy_floor if self.inclusive else value > self.entropy_floor


@dataclass(frozen=True)
class SourceRules:
    """The usable rules of one external rule set, and the key words that route rows to them."""

    name: str  # e.g. ``betterleaks 2.0.0+2.0.0-rc.4``
    rules: tuple[SourceRule, ...]
    keywords: tuple[str, ...]  # every key word once
    by_keyword: dict[str, tuple[int, ...]] = field(default_factory=dict)  # -> rule indexes
    skipped: dict[str, str] = field(default_factory=dict)  # rule id -> why it was left out
    gate: ContextRule | None = None  # memkiln's benign gate, for the ``gated`` rules
    alone: tuple[int, ...] = ()  # rules routed by their own contains_any (a common key word)
    listed_keywords: tuple[str, ...] = ()  # key words of the other rules, listed per row
    #: every key word in one ASCII case-insensitive regex: the same rows as an Aho-Corasick
    #: ``contains_any`` of the key words, found about 3.5 times faster (the regex engine's lazy
    #: DFA, against the automaton Polars builds for hundreds of case-insensitive patterns)
    keyword_pattern: str = ""

    def keyword_rows(self, series: pl.Series, *, multi_literal: bool = True) -> pl.Series:
        """The rows of ``series`` that hold one of the key words (null rows: false): with
        Hyperscan when installed (``literal_scan``; ``multi_literal=False``: never), else with
        the regex, the same rows."""
        if multi_literal:
            held = rows_holding(series, self.keywords)
            if held is not None:
                return held
        if self.keyword_pattern:
            found = series.str.contains(self.keyword_pattern)
        else:
            found = series.str.contains_any(list(self.keywords), ascii_case_insensitive=True)
        return found.fill_null(False)

    def confirms(self, rule: SourceRule, secret: str, span: str) -> bool:
        """Does ``secret`` (found by ``rule`` in ``span``) pass the rule's and memkiln's gates?"""
        if not rule.passes(secret):
            return False
        return not rule.gated or self.gate is None or self.gate.passes(secret, span)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return tuple(rule.id for rule in self.rules)


_ESCAPE_DEPTH = (
    ("\\\\?['\"\\x60]", "\\\\*['\"\\x60]"),  # \\?['"\x60] -> \\*['"\x60]
    ("\\\\[nr]", "\\\\+[nrtu]"),  # \\[nr] -> \\+[nrtu]: also \t and \u001b (ANSI)
)
_LEAD = r"(?:(?-u:\b)|\\+[nrt]|(?:\x1b|\\+u001[bB])\[[0-9;]*m)"
_ASCII_CLASS = {"w": "0-9A-Za-z_", "d": "0-9", "s": "\\t\\n\\f\\r "}


def polars_pattern(go_pattern: str) -> str:
    """A Go RE2 pattern as Rust ``regex`` (Polars) reads it with the same meaning.

    Go's ``\\b \\w \\d \\s`` are ASCII; Rust's are Unicode, which makes the automaton of a
    ``[\\w.-]{0,50}`` large (slow to build) and disables the fast engine. They are written as
    their ASCII classes (``\\b`` as ``(?-u:\\b)``), inside brackets and out.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(go_pattern):
        c = go_pattern[i]
        if c == "\\" and i + 1 < len(go_pattern):
            nxt = go_pattern[i + 1]
            if nxt in "bB" and not in_class:
                out.append(f"(?-u:\\{nxt})")
            elif nxt in _ASCII_CLASS:
                body = _ASCII_CLASS[nxt]
                out.append(body if in_class else f"[{body}]")
            elif nxt in "WDS" and not in_class:
                out.append(f"[^{_ASCII_CLASS[nxt.lower()]}]")
            else:
                out.append(c + nxt)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            i += 1
            # a ] right after [ or [^ is a literal
            for lead in ("^", "]"):
                if go_pattern.startswith(lead, i):
                    out.append(lead)
                    i += 1
            continue
        if c == "[" and in_class and go_pattern.startswith("[:", i):
            end = go_pattern.find(":]", i + 2)
            if end != -1:
                out.append(go_pattern[i : end + 2])
                i = end + 2
                continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    # the end-of-secret context of most rules allows one escape level (\" or \n); memkiln
    # reads raw JSONL lines, where a value can sit in a string inside a string, before a \t
    # or an ANSI colour code
    pattern = "".join(out)
    for one, any_depth in _ESCAPE_DEPTH:
        pattern = pattern.replace(one, any_depth)
    # a token that starts the pattern after \b may follow a JSON \n or \t escape or an ANSI
    # colour code in raw JSONL text, where no word boundary is (``\npul-…``): the lead memkiln's
    # own token rules use (kept outside the secret, which is a capture group or is rejected)
    for head in ("(?-u:\\b)", "(?i)(?-u:\\b)"):
        if pattern.startswith(head):
            return head.removesuffix("(?-u:\\b)") + _LEAD + pattern[len(head) :]
    return pattern


def _group_after_lead(pattern: str) -> str:
    """``pattern`` with what follows the lead :func:`polars_pattern` put first as group 1."""
    for head in ("", "(?i)"):
        if pattern.startswith(head + _LEAD):
            return f"{head}{_LEAD}({pattern[len(head + _LEAD) :]})"
    return pattern


def parse_betterleaks(
    text: str,
    *,
    name: str,
    exclude: Iterable[str] = (),
    gated: Iterable[str] = (),
    gate: ContextRule | None = None,
    min_keyword_length: int = 1,
) -> SourceRules:
    """The rules of a Betterleaks (gitleaks-format) TOML configuration that memkiln can run.

    Rules named in ``gated`` (generic ones) confirm a secret only if ``gate`` passes it too. A
    rule with a key word shorter than ``min_keyword_length`` is left out: ``api`` or ``zlm``
    occur by chance in the base64 blobs of sessions, so nearly every row would reach its regex.
    """
    data = tomllib.loads(text)
    excluded = set(exclude)
    gated_ids = set(gated)
    rules: list[SourceRule] = []
    skipped: dict[str, str] = {}
    probe = pl.Series([""], dtype=pl.String)
    for raw in data.get("rules", []):
        rule_id = str(raw.get("id", ""))
        why = _unusable(raw, excluded, min_keyword_length)
        if why:
            skipped[rule_id] = why
            continue
        pattern = polars_pattern(raw["regex"])
        try:
            dtype = probe.str.extract_groups(pattern).dtype
        except pl.exceptions.ComputeError:
            skipped[rule_id] = "regex does not compile in Polars"
            continue
        if isinstance(dtype, pl.Struct) and not dtype.fields:  # the secret is the match:
            pattern = _group_after_lead(pattern)  # not the \n escape the lead may take
        floor, inclusive = 0.0, True
        found = _FILTER.match(_filter_text(raw))
        if found:
            floor = float(found.group(2))
            inclusive = found.group(1) == "<"
        rules.append(
            SourceRule(
                id=ID_PREFIX + rule_id,
                pattern=pattern,
                keywords=tuple(dict.fromkeys(k.lower() for k in raw["keywords"])),
                entropy_floor=floor,
                inclusive=inclusive,
                gated=rule_id in gated_ids,
            )
        )
    by_keyword: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        for keyword in rule.keywords:
            by_keyword.setdefault(keyword, []).append(index)
    alone = tuple(i for i, rule in enumerate(rules) if set(rule.keywords) & COMMON_KEYWORDS)
    listed = tuple(dict.fromkeys(
        k for i, rule in enumerate(rules) if i not in alone for k in rule.keywords))  # fmt: skip
    return SourceRules(
        name=name,
        rules=tuple(rules),
        keywords=tuple(by_keyword),
        by_keyword={k: tuple(v) for k, v in by_keyword.items()},
        skipped=skipped,
        gate=gate,
        alone=alone,
        listed_keywords=listed,
        keyword_pattern=keyword_pattern(tuple(by_keyword)),
    )


def keyword_pattern(keywords: Iterable[str]) -> str:
    """One regex that finds any of ``keywords`` ASCII case-insensitively (``(?i-u:...)``: no
    Unicode case folding, as ``contains_any(..., ascii_case_insensitive=True)``); every
    character but a letter or digit is written as a hex escape. Empty when a key word is not
    ASCII (the caller then uses ``contains_any``) or there is none."""
    words = list(keywords)
    if not words or not all(k.isascii() for k in words):
        return ""
    escaped = ("".join(c if c.isalnum() else f"\\x{{{ord(c):02x}}}" for c in k) for k in words)
    return "(?i-u:" + "|".join(escaped) + ")"


def _filter_text(raw: dict[str, object]) -> str:
    """The rule's filter expression on one line, its ``//`` comment lines left out."""
    lines = str(raw.get("filter", "")).splitlines()
    return " ".join(" ".join(ln for ln in lines if not ln.strip().startswith("//")).split())


def _unusable(raw: dict[str, object], excluded: set[str], min_keyword_length: int) -> str | None:
    if raw.get("id") in excluded:
        return "excluded by memkiln's rules file"
    if not isinstance(raw.get("regex"), str) or not raw.get("regex"):
        return "no regex"
    if raw.get("skipReport"):
        return "skipReport (a helper of another rule)"
    keywords = raw.get("keywords")
    if (
        not isinstance(keywords, list)
        or not keywords
        or not all(isinstance(k, str) and k for k in keywords)
    ):
        return "no key word (every row would reach its regex)"
    if any(len(k) < min_keyword_length for k in keywords):
        return f"a key word shorter than {min_keyword_length} (found by chance in base64 data)"
    flt = _filter_text(raw)
    if flt and not _FILTER.match(flt):
        return "filter memkiln cannot evaluate"
    return None


# -- the pass ----------------------------------------------------------------------------------


def _replacement(secret: str, marker: str) -> str:
    head = _ESCAPE_HEAD.match(secret)
    return (head.group(0) if head else "") + marker


def route(candidates: pl.Series, rules: SourceRules) -> dict[int, list[int]]:
    """Rule index -> the candidate rows that hold one of its key words."""
    rows_of: dict[int, list[int]] = {}
    # rules with a key word sessions are full of: one contains_any each (listing every
    # occurrence of ``key`` or ``test_`` per row would cost more than the regexes)
    for index in rules.alone:
        hit = candidates.str.contains_any(
            list(rules.rules[index].keywords), ascii_case_insensitive=True
        ).fill_null(False)
        rows_of[index] = hit.arg_true().to_list()
    if rules.listed_keywords:
        # the others: which of their (rarer) key words each candidate row holds. Each key word is
        # replaced by its number between two control characters and the numbers are read back:
        # twice as fast as str.extract_many, which was 10 MB/s on session rows. (A row that holds
        # such a sequence itself only reaches a few more regexes.)
        numbered = candidates.str.replace_many(
            list(rules.listed_keywords),
            [f"\x01{i}\x02" for i in range(len(rules.listed_keywords))],
            ascii_case_insensitive=True,
        )
        listed = numbered.str.extract_all("\x01[0-9]+\x02")
        present = (
            pl.DataFrame({"row": range(len(candidates)), "kw": listed})
            .explode("kw")
            .drop_nulls("kw")
            .select("row", kw=pl.col("kw").str.strip_chars("\x01\x02").cast(pl.Int64))
            .filter(pl.col("kw") < len(rules.listed_keywords))
            .unique()
        )
        routed: dict[int, set[int]] = {}
        for row, number in present.iter_rows():
            for index in rules.by_keyword.get(rules.listed_keywords[number], ()):
                if index not in rules.alone:
                    routed.setdefault(index, set()).add(row)
        rows_of |= {index: sorted(routed[index]) for index in sorted(routed)}
    return rows_of


def in_route_order(rows_of: dict[int, list[int]], rules: SourceRules) -> dict[int, list[int]]:
    """``rows_of`` in the order rules are tried: those routed alone, then the others by
    index (the first rule that confirms a text decides its replacement)."""
    alone = [i for i in rules.alone if i in rows_of]
    rest = sorted(i for i in rows_of if i not in set(rules.alone))
    return {i: rows_of[i] for i in alone + rest}


#: The rows holding a key word, and per rule the rows among them to search (numbered among
#: those rows): what a prefilter found instead of :func:`route`.
Routing = tuple[pl.Series, dict[int, list[int]]]


def _confirmed(
    series: pl.Series, rules: SourceRules, marker: str, routed: Routing | None = None
) -> tuple[pl.Series, dict[str, str], Counter[str]]:
    """Candidate row mask, confirmed text -> its redaction, and matches replaced per rule.

    A provider rule's secret is replaced wherever it occurs in the batch. A generic (gated)
    rule's is replaced only in the match where it was confirmed: a value confirmed after a key
    (``key: disableKeyboardA11y``) is left alone where it is only a word.
    """
    hits: Counter[str] = Counter()
    mask = rules.keyword_rows(series) if routed is None else routed[0]
    if not mask.any():
        return mask, {}, hits
    candidates = series.filter(mask)
    rows_of = in_route_order(route(candidates, rules) if routed is None else routed[1], rules)
    found: dict[str, str] = {}
    for index, rows in rows_of.items():
        rule = rules.rules[index]
        if not rows:
            continue
        spans = candidates.gather(rows).str.extract_all(rule.pattern).explode().drop_nulls()
        if spans.is_empty():
            continue
        secret_of = _secrets_of(spans.unique(), rule.pattern)
        for span in spans.to_list():
            secret = secret_of.get(span)
            if not secret:
                continue
            # a generic rule's value is replaced where it was found, a provider's everywhere
            key = span if rule.gated else secret
            if key in found or rules.confirms(rule, secret, span):
                found.setdefault(key, key.replace(secret, _replacement(secret, marker)))
                hits[rule.id] += 1
    return mask, found, hits


def _python_re(pattern: str) -> re.Pattern[str] | None:
    """The pattern for Python's ``re`` (same leftmost-first semantics), or None if it differs."""
    if pattern not in _PY_CACHE and "[:" in pattern:  # a POSIX class: a set in Python
        _PY_CACHE[pattern] = None
    if pattern not in _PY_CACHE:
        try:
            with warnings.catch_warnings():  # "possible nested set" ([[a-z]--[x]] is Rust's)
                warnings.simplefilter("ignore", FutureWarning)
                _PY_CACHE[pattern] = re.compile(pattern.replace("(?-u:\\b)", "\\b"), re.ASCII)
        except re.error:  # e.g. a (?i) flag in the middle, which Go and Rust allow
            _PY_CACHE[pattern] = None
    return _PY_CACHE[pattern]


_PY_CACHE: dict[str, re.Pattern[str] | None] = {}


def _secrets_of(spans: pl.Series, pattern: str) -> dict[str, str]:
    """Each match -> its secret: the first non-empty capture group, else the match itself.

    The spans are few and short: Python's ``re`` (compiled once per process) reads their groups
    where it can, rather than a Polars call that would compile the pattern again per batch.
    """
    compiled = _python_re(pattern)
    if compiled is not None:
        out: dict[str, str] = {}
        for span in spans.to_list():
            found = compiled.search(span)
            captured = [g for g in found.groups() if g] if found else []
            out[span] = captured[0] if captured else span
        return out
    groups = spans.str.extract_groups(pattern).struct.unnest()
    if not groups.width:  # no capture group: the secret is the match
        groups = pl.DataFrame(height=len(spans))
    first = (pl.when(pl.col(c) != "").then(pl.col(c)) for c in groups.columns)
    return dict(
        groups.with_columns(__span=spans)
        .select("__span", pl.coalesce(*first, pl.col("__span")).alias("__secret"))
        .iter_rows()
    )


def redact_source_series(series: pl.Series, rules: SourceRules, marker: str) -> pl.Series:
    """``series`` with the secrets the external rules confirm replaced by ``marker``."""
    return redact_source_with_hits(series, rules, marker)[0]


def redact_source_with_hits(
    series: pl.Series, rules: SourceRules, marker: str, *, routed: Routing | None = None
) -> tuple[pl.Series, dict[str, int]]:
    """:func:`redact_source_series` and :func:`source_hits` of ``series`` in one search;
    ``routed``: the rows a prefilter found for the key words and each rule."""
    mask, found, hits = _confirmed(series, rules, marker, routed)
    if not found:
        return series, dict(hits)
    keys = sorted(found, key=len, reverse=True)  # a text that contains another goes whole
    replaced = series.filter(mask).str.replace_many(keys, [found[k] for k in keys])
    return series.clone().scatter(mask.arg_true(), replaced), dict(hits)


def source_hits(series: pl.Series, rules: SourceRules, marker: str) -> dict[str, int]:
    """Replaced spans per external rule in ``series`` (the text before this pass)."""
    return dict(_confirmed(series, rules, marker)[2])
