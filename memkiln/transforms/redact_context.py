"""Secrets recognised by a keyword nearby and a random-looking value: the entropy-gated pass.

A key name such as ``ADAFRUIT_IO_KEY``, ``clientSecret``, ``--auth-token``, ``SECRET key`` or
``ASANA_PAT`` followed, within a short window, by a value that looks random is a secret in any
syntax (env, YAML, JSON, TOML, INI, shell export, a CLI flag, prose). A regular expression finds
the candidates (keyword, window, value); a gate decides on the value alone, which no regular
expression can: long enough, letters and digits mixed, Shannon entropy high enough, and none
of the shapes sessions are full of (numbers, versions, paths, URLs, ``sha512-`` integrity
hashes, identifiers written in words). ``api_key = get_key()``, ``TOKEN_LIMIT=4096`` or
``token: self.token_value`` stay as they are.

The pass is vectorized: Polars finds the candidate spans of a whole batch (a literal keyword
prefilter first, so only candidate rows reach the window regex), the gate runs once per
distinct span (few, short), and the spans that pass are replaced across the batch with one
Aho-Corasick ``str.replace_many``. The value never contains a quote or a backslash and never
starts after an escaping backslash, so a valid JSON line stays valid.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = [
    "ContextRule",
    "context_hits",
    "parse_context_rule",
    "redact_context_series",
    "redact_context_with_hits",
]

_KEYS = frozenset(
    {"id", "description", "keywords", "window", "value", "min_length", "min_entropy",
     "letters_only_min_length", "letters_only_min_entropy", "max_vowel_share",
     "digits_only_min_length", "max_length", "weak_keywords", "weak_benign", "benign"}
)  # fmt: skip


@dataclass(frozen=True)
class ContextRule:
    """One keyword-context rule; ``pattern`` has group 1 = keyword and window, 2 = value."""

    id: str
    description: str
    pattern: str
    prefilter: tuple[str, ...]  # literal keywords, ASCII case-insensitive
    row_filter: str  # key word literals, window, value: no boundary check, but literal-led
    min_length: int
    min_entropy: float
    letters_only_min_length: int
    letters_only_min_entropy: float
    max_vowel_share: float
    digits_only_min_length: int
    benign: str  # a value matching this (anchored) is never a secret
    max_length: int = 256
    weak_keywords: tuple[str, ...] = ()  # key words that alone do not vouch for ``weak_benign``
    weak_benign: str = "(?!)"  # values (UUIDs) that are secrets only after a strong key word

    def row_filters(self) -> tuple[str, ...]:
        """``row_filter`` in pieces a multi-pattern scanner takes, together matching at least
        as much: one per key word (any case) when there are many (an alternation of hundreds
        of literals before a window is too large for Hyperscan, whose prefilter mode then
        reports nearly every row)."""
        if len(self.prefilter) <= MANY_KEYWORDS:
            return (self.row_filter,)
        tail = self.row_filter[self.row_filter.index(_KEY_WORDS_END) + len(_KEY_WORDS_END) :]
        return tuple(f"(?i:{re.escape(k)}){tail}" for k in self.prefilter)

    def passes(self, value: str, prefix: str = "") -> bool:
        """The gate: does ``value`` look like a random secret rather than text or code?"""
        if not self.min_length <= len(value) <= self.max_length:
            return False
        if _benign_re(self.benign).match(value):
            return False
        if _benign_re(self.weak_benign).match(value) and not self._strong(prefix):
            return False
        has_digit = any(c.isdigit() for c in value)
        has_alpha = any(c.isalpha() for c in value)
        if has_digit and has_alpha:
            return entropy(value) >= self.min_entropy
        if has_alpha:  # no digit: long, dense, few vowels, not words joined by _ . -
            letters = [c for c in value if c.isalpha()]
            vowels = sum(c in "aeiouAEIOU" for c in letters)
            return (
                len(value) >= self.letters_only_min_length
                and entropy(value) >= self.letters_only_min_entropy
                and vowels <= self.max_vowel_share * len(letters)
                and not _WORDS.match(value)
            )
        return (
            has_digit
            and len(value) >= self.digits_only_min_length
            and entropy(value) >= self.min_entropy
        )

    def _strong(self, prefix: str) -> bool:
        """Does ``prefix`` (the key word, what led to it and the window) vouch for a value a
        weak key word alone does not: a strong key word, or a weak one joined to the name
        before it (``blocknative_key=``, ``dailyKEY``), not a header of its own
        (``Idempotency-Key:``)?"""
        lowered = prefix.lower()
        if any(k in lowered for k in self.prefilter if k not in self.weak_keywords):
            return True
        for k in self.weak_keywords:
            at = lowered.find(k)
            if at > 0 and (prefix[at - 1] == "_" or prefix[at - 1].isalnum()):
                return True
        return False


def entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


_WORDS = re.compile(r"[A-Za-z]+(?:[_.-][A-Za-z]+)+$")
_BENIGN_CACHE: dict[str, re.Pattern[str]] = {}


def _benign_re(pattern: str) -> re.Pattern[str]:
    compiled = _BENIGN_CACHE.get(pattern)
    if compiled is None:
        compiled = _BENIGN_CACHE[pattern] = re.compile(f"(?:{pattern})")
    return compiled


def parse_context_rule(raw: Any, *, source: str) -> ContextRule:
    """Validate one ``[[context]]`` table of the rules file."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: each [[context]] must be a table")
    where = f"{source}: context rule {raw.get('id')!r}"
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    keywords = raw.get("keywords")
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise ValueError(f"{where}: keywords must be a list of literal strings")
    by_length = sorted(keywords, key=len, reverse=True)
    # spelled lower / Capitalised / UPPER rather than (?i:...): a few dozen literals keep the
    # regex engine's literal prefilter on
    lower = "|".join(re.escape(k.lower()) for k in by_length)
    # keywords are spelled as given, Capitalised and UPPER (APIKey is given as such)
    capital = "|".join(re.escape(v) for v in dict.fromkeys(
        v for k in by_length for v in (k[0].upper() + k[1:], k.capitalize())))  # fmt: skip
    upper = "|".join(re.escape(k.upper()) for k in by_length)
    glued = f"{capital}|{upper}"
    # a key word starts a word, or follows a lower-case letter or digit Capitalised or in UPPER
    # case (clientSecret, signupgeniusKEY), or follows an upper-case letter in lower case
    # (buttercmsPRIVATEkey), or, six letters or more and not weak, follows a letter in lower
    # case (shortcutaccess: a provider's name glued to it; monkey, bypass stay words); the
    # window then starts with neither a letter nor a digit (keyboard, PATCH, key words inside
    # a base64 blob)
    weak = {k.lower() for k in raw.get("weak_keywords", [])}
    long_lower = "|".join(
        re.escape(k.lower()) for k in by_length if len(k) >= 6 and k.lower() not in weak
    )
    pattern = (
        f"((?:(?:^|[^A-Za-z0-9])(?:{lower}|{glued})|[A-Za-z0-9](?:{capital})|[a-z0-9](?:{upper})"
        f"|[A-Z](?:{lower})|[a-z](?:{long_lower}))"
        f"{raw['window']})({raw['value']})"
    )
    row_filter = f"(?:{lower}|{glued}){_KEY_WORDS_END}{raw['window']}{raw['value']}"
    try:
        dtype = pl.Series([""], dtype=pl.String).str.extract_groups(pattern).dtype
    except pl.exceptions.ComputeError as err:
        raise ValueError(f"{where}: regex does not compile: {err}") from err
    if not isinstance(dtype, pl.Struct) or len(dtype.fields) != 2:
        raise ValueError(f"{where}: window and value must not add capture groups")
    return ContextRule(
        id=str(raw["id"]),
        description=str(raw.get("description", "")),
        pattern=pattern,
        prefilter=tuple(k.lower() for k in keywords),
        row_filter=row_filter,
        min_length=int(raw["min_length"]),
        min_entropy=float(raw["min_entropy"]),
        letters_only_min_length=int(raw["letters_only_min_length"]),
        letters_only_min_entropy=float(raw["letters_only_min_entropy"]),
        max_vowel_share=float(raw["max_vowel_share"]),
        digits_only_min_length=int(raw["digits_only_min_length"]),
        benign=str(raw.get("benign", "(?!)")),
        max_length=int(raw.get("max_length", 256)),
        weak_keywords=tuple(k.lower() for k in raw.get("weak_keywords", [])),
        weak_benign=str(raw.get("weak_benign", "(?!)")),
    )


#: Above this many key words a rule's rows are found by its row filter alone.
MANY_KEYWORDS = 64
#: Ends the key words of a row filter (an empty group: matches as it is not there).
_KEY_WORDS_END = "(?:)"


#: Rule index, the text as it now is -> the rows that rule may match (a prefilter's answer).
Candidates = Callable[[int, pl.Series], pl.Series]


def _confirmed(
    series: pl.Series, rule: ContextRule, marker: str, maybe: pl.Series | None = None
) -> tuple[dict[str, str], pl.Series, int]:
    """Distinct candidate spans of ``series`` whose value passes the gate -> their redaction,
    the indexes of the rows that may hold a span (a row that holds one passes both filters),
    and how many candidate spans (with repeats) are confirmed ones: the rule's hits.
    ``maybe``: the rows a prefilter found for the row filter (the key-word search skipped)."""
    no_rows = pl.Series(dtype=pl.UInt32)
    if maybe is None and len(rule.prefilter) > MANY_KEYWORDS:
        # hundreds of key words that rows seldom hold: the case-insensitive key-word search
        # reads every row whole (0.75 s per 100 MB of session text against 0.27 for the row
        # filter's regex, whose literals are spelled in three cases): the regex alone
        first = series.str.contains(rule.row_filter)
    elif maybe is None:
        first = series.str.contains_any(list(rule.prefilter), ascii_case_insensitive=True)
    else:
        first = maybe
    first = first.fill_null(False)
    if not first.any():
        return {}, no_rows, 0
    rows = first.arg_true()
    candidates = series.filter(first)
    # then the pattern without its leading boundary: it starts with literals, so the regex
    # engine's prefilter skips most of the text; few rows pass it
    second = candidates.str.contains(rule.row_filter).fill_null(False)
    if not second.any():
        return {}, no_rows, 0
    rows, candidates = rows.filter(second), candidates.filter(second)
    every = candidates.str.extract_all(rule.pattern).explode().drop_nulls()
    spans = every.unique()
    if spans.is_empty():
        return {}, no_rows, 0
    parts = spans.str.extract_groups(rule.pattern).struct.unnest()
    out: dict[str, str] = {}
    for span, prefix, value in zip(
        spans.to_list(),
        parts[parts.columns[0]].to_list(),
        parts[parts.columns[1]].to_list(),
        strict=True,
    ):
        if value and rule.passes(value, prefix or ""):
            out[span] = span.replace(value, marker) if prefix is None else prefix + marker
    hits = int(every.is_in(list(out)).sum()) if out else 0
    return out, rows, hits


def redact_context_series(
    series: pl.Series, rules: tuple[ContextRule, ...], marker: str
) -> pl.Series:
    """``series`` with the values the gate confirms replaced by ``marker``."""
    return redact_context_with_hits(series, rules, marker)[0]


def redact_context_with_hits(
    series: pl.Series,
    rules: tuple[ContextRule, ...],
    marker: str,
    *,
    candidates: Candidates | None = None,
) -> tuple[pl.Series, dict[str, int]]:
    """:func:`redact_context_series` and :func:`context_hits` of ``series`` in one search;
    ``candidates``: a prefilter's rows for each rule."""
    hits: dict[str, int] = {}
    for index, rule in enumerate(rules):
        maybe = candidates(index, series) if candidates else None
        found, rows, n = _confirmed(series, rule, marker, maybe)
        if found:
            hits[rule.id] = n
            # longest first: a span that contains another is replaced whole; only the rows that
            # can hold a span are rewritten
            keys = sorted(found, key=len, reverse=True)
            replaced = series.gather(rows).str.replace_many(keys, [found[k] for k in keys])
            series = series.clone().scatter(rows, replaced)
    return series, hits


def context_hits(series: pl.Series, rules: tuple[ContextRule, ...], marker: str) -> dict[str, int]:
    """Replaced spans per context rule in ``series`` (the text before this pass); each rule
    looks at the text the rules before it redacted."""
    hits: dict[str, int] = {}
    for rule in rules:
        found, _, _ = _confirmed(series, rule, marker)
        if found:
            rows = series.filter(series.str.contains(rule.row_filter))
            spans = rows.str.extract_all(rule.pattern).explode().drop_nulls()
            hits[rule.id] = int(spans.is_in(list(found)).sum())
            series = redact_context_series(series, (rule,), marker)
    return hits
