"""Secrets inside base64: the encoded pass, after every other step.

A secret written in base64 reads as a random run of letters, which no rule recognises: the
base64 of a JSON object holding an ``api_key`` (``eyJhcGlfa2V5Ijoi…``, a Kubernetes secret, a
config passed in an environment variable) or a short ``data:`` URL holding a token. Each
``[[encoded]]`` rule of the rules file finds such runs (its regex: group 1, kept, before group
2, the base64 text); each distinct run is decoded (standard or URL-safe alphabet), and when
the decoded text is UTF-8 and the rule set redacts something in it, the run is a secret: it
becomes the marker. Runs that decode to binary (an image) or to text without a secret (a JWT
header, a source map) stay as they are.

The pass is vectorized like the key-word pass: Polars finds the candidate runs of a batch (the
regexes start with literals: ``data:``, ``eyJ``), the decoding runs once per distinct run (few),
and the confirmed spans are replaced in the rows that hold them with one Aho-Corasick
``str.replace_many``. A run is base64 characters only: no quote, no backslash, so a valid JSON
text stays valid.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = ["EncodedRule", "parse_encoded_rule", "redact_encoded_with_hits"]

_KEYS = frozenset({"id", "description", "regex"})

#: Redacts one batch of decoded texts with the whole rule set (the encoded pass left out).
Redactor = Callable[[pl.Series], pl.Series]


@dataclass(frozen=True)
class EncodedRule:
    """One ``[[encoded]]`` rule: ``pattern`` has group 1 (kept) and group 2 (the base64); what
    the match holds after group 2 is kept too."""

    id: str
    description: str
    pattern: str


def parse_encoded_rule(raw: Any, *, source: str) -> EncodedRule:
    """Validate one ``[[encoded]]`` table of the rules file."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: each [[encoded]] must be a table")
    where = f"{source}: encoded rule {raw.get('id')!r}"
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    pattern = raw.get("regex")
    if not isinstance(raw.get("id"), str) or not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{where}: id and regex must be strings")
    try:
        dtype = pl.Series([""], dtype=pl.String).str.extract_groups(pattern).dtype
    except pl.exceptions.ComputeError as err:
        raise ValueError(f"{where}: regex does not compile: {err}") from err
    if not isinstance(dtype, pl.Struct) or len(dtype.fields) != 2:
        raise ValueError(f"{where}: the regex must have two groups (kept prefix, base64)")
    return EncodedRule(
        id=str(raw["id"]), description=str(raw.get("description", "")), pattern=pattern
    )


def decode(text: str) -> str | None:
    """``text`` decoded from base64 (either alphabet, padding optional) as UTF-8, or None."""
    padded = text.rstrip("=")
    padded += "=" * (-len(padded) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _confirmed(
    series: pl.Series,
    rule: EncodedRule,
    marker: str,
    redact: Redactor,
    maybe: pl.Series | None = None,
) -> tuple[dict[str, str], pl.Series, int]:
    """Distinct candidate spans that decode to text holding a secret -> their redaction, the
    rows that may hold one, and how many spans (with repeats) were confirmed."""
    no_rows = pl.Series(dtype=pl.UInt32)
    if maybe is None:
        hit = series.str.contains(rule.pattern).fill_null(False)
    else:  # only the rows a prefilter found may match
        hit = maybe.fill_null(False)
        if hit.any():
            hit = hit.scatter(hit.arg_true(), series.filter(hit).str.contains(rule.pattern))
    if not hit.any():
        return {}, no_rows, 0
    rows = hit.arg_true()
    every = series.filter(hit).str.extract_all(rule.pattern).explode().drop_nulls()
    spans = every.unique()
    parts = spans.str.extract_groups(rule.pattern).struct.unnest()
    prefixes = parts[parts.columns[0]].to_list()
    payloads = parts[parts.columns[1]].to_list()
    decoded = [decode(p) if p else None for p in payloads]
    texts = [d for d in decoded if d is not None]
    if not texts:
        return {}, no_rows, 0
    after = iter(redact(pl.Series(texts, dtype=pl.String)).to_list())
    out: dict[str, str] = {}
    for span, prefix, payload, text in zip(
        spans.to_list(), prefixes, payloads, decoded, strict=True
    ):
        if text is not None and next(after) != text:
            head = prefix or ""  # what the regex matched after the run is kept too
            out[span] = head + marker + span[len(head) + len(payload) :]
    hits = int(every.is_in(list(out)).sum()) if out else 0
    return out, rows, hits


def redact_encoded_with_hits(
    series: pl.Series,
    rules: tuple[EncodedRule, ...],
    marker: str,
    redact: Redactor,
    *,
    candidates: Callable[[int, pl.Series], pl.Series] | None = None,
) -> tuple[pl.Series, dict[str, int]]:
    """``series`` with every base64 run that holds a secret replaced, and the hits per rule;
    ``candidates``: rule index, text -> the rows a prefilter found for that rule."""
    hits: dict[str, int] = {}
    for index, rule in enumerate(rules):
        maybe = candidates(index, series) if candidates else None
        found, rows, n = _confirmed(series, rule, marker, redact, maybe)
        if found:
            hits[rule.id] = n
            keys = sorted(found, key=len, reverse=True)
            replaced = series.gather(rows).str.replace_many(keys, [found[k] for k in keys])
            series = series.clone().scatter(rows, replaced)
    return series, hits
