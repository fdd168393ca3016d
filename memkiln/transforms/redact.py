"""Secret redaction: every text is passed through here before it is stored or sent.

The rules are data (``secret_rules.toml`` next to this module). Each rule belongs to one of three
passes, and each pass is a single combined alternation applied with ``str.replace_all``:

1. ``block``: PEM/OpenSSH/PGP private-key blocks, from ``-----BEGIN ... PRIVATE KEY-----`` to the
   matching END line, or through the base64 body when the block is truncated. It runs first so
   that no later rule can cut a block in two.
2. ``token``: self-identifying tokens (``ghp_...``, ``AKIA...``, ``sk-...``, JWTs, ...), replaced
   whole. Group 1 keeps what the lead-in matched (nothing after a word boundary, or a ``\\n``
   escape or an ANSI colour code), and for tokens whose first letter could follow a backslash
   (``npm_``, ``rk_live_``, ...) also the type prefix.
3. ``keyed``: values recognised by what precedes them (``password: ...``, ``DB_PASSWORD=...``,
   ``Authorization: Bearer ...``, ``scheme://user:...@host``). Group 1, the key with its quotes,
   is kept, an optional group 2 after the value (the ``@`` before a host, the character that
   ends a generic value) is kept too, and the value becomes ``[REDACTED_SECRET]``. Generic keys
   fire on credential-looking values (8+ characters with a digit or a symbol) and on
   letters-only values that end there (8+ letters after a whole-word key, as Codex's own rule
   does; 10+ after a prefixed one such as ``DB_PASSWORD``), never on a call, an attribute, a
   type or a variable, so ``max_tokens: 4096``, ``token = get_token()``,
   ``token = self.token_value``, ``secret = hashlib.sha256(seed)``, ``password=${DB_PASS}`` or
   ``password: <redacted>`` stay as they are.

Groups are numbered across the whole alternation, so a pass's replacement is the concatenation of
every rule's kept-prefix group, the marker, then every kept-suffix group: only the branch that
matched contributes text, the groups of the other branches are empty. Every branch starts with
a literal or an assertion, never a character class, which keeps the combined automaton small
and lets the regex engine use literal prefilters.

JSON-safety invariant. Redaction runs on decoded texts and on JSON texts alike (an item's
``payload_json``, a tool call's arguments, a quarantined line), and a secret may sit at any
escape depth (``"password": "..."`` in a decoded string, ``\\"password\\": \\"...`` in a tool
output, ``\\\\\\"api_key\\\\\\":...`` inside function-call arguments). A redacted valid JSON
text stays valid JSON because the replaced part of every match

* never contains a double quote,
* contains a backslash only as a whole escape run followed by ``n``, ``r``, ``t`` or ``u2192``
  (line breaks and file-viewer gutters inside key blocks),
* never starts on the character after an escaping backslash: keys and quotes (``\\*["']``) are
  inside the kept group; a token starts after a word boundary, and a word boundary follows a
  backslash only when the token starts with one of ``b f n r t u``, whose type prefix is kept.

Values never begin with ``[``, so ``[REDACTED_SECRET]`` is never matched again: after redaction
:func:`secret_count_expr` is 0 and redaction is idempotent. The loader checks, for every rule,
that it compiles in Polars, has the right capture groups, and matches neither the empty string
nor already-redacted text.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import polars as pl
from polars.exceptions import ComputeError

from memkiln.transforms.hs_syntax import to_hyperscan
from memkiln.transforms.redact_context import (
    ContextRule,
    parse_context_rule,
    redact_context_with_hits,
)
from memkiln.transforms.redact_encoded import (
    EncodedRule,
    parse_encoded_rule,
    redact_encoded_with_hits,
)
from memkiln.transforms.redact_prefilter import Plan, Prefilter, Scan, mask_of
from memkiln.transforms.redact_source import (
    SourceRules,
    parse_betterleaks,
    redact_source_with_hits,
)

__all__ = [
    "REDACTED",
    "Pass",
    "Rule",
    "RuleSet",
    "plan_fits",
    "plan_prefilter",
    "redact_counted_series",
    "redact_expr",
    "redact_frame_counted",
    "redact_secrets",
    "redact_series",
    "redact_text",
    "rewrite_rows",
    "rule_hit_counts",
    "secret_count_expr",
    "unescape_expr",
    "unescape_series",
]

REDACTED: str = "[REDACTED_SECRET]"

PassName = Literal["block", "token", "keyed"]
PASS_ORDER: tuple[PassName, ...] = get_args(PassName)
#: A rule's pass: one of the three, or ``after``: run last, on what every step before replaced
#: (the rest of a token cut by a line break after its marker).
RulePassName = Literal["block", "token", "keyed", "after"]
RULE_PASSES: tuple[RulePassName, ...] = get_args(RulePassName)

_RULES_RESOURCE = "secret_rules.toml"
_RULE_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FRAGMENT_REF = re.compile(r"\{\{([a-z_][a-z0-9_]*)\}\}")
_RULE_KEYS = frozenset({"id", "pass", "description", "regex", "literals"})
_TOP_KEYS = frozenset({"fragments", "rules", "context", "source", "encoded"})
_SOURCE_KEYS = frozenset({"name", "exclude", "gated", "min_keyword_length"})
# Text a rule must leave alone: what redaction itself produces, in the contexts rules look at.
_ALREADY_REDACTED: tuple[str, ...] = (
    REDACTED,
    f"token={REDACTED}",
    f"API_TOKEN={REDACTED}",
    f"password: {REDACTED}",
    f'"api_key": "{REDACTED}"',
    f'\\"secret\\":\\"{REDACTED}\\"',
    f"Authorization: Bearer {REDACTED}",
    f"--password {REDACTED}",
    f"postgres://user:{REDACTED}@db:5432/app",
    f"aws_secret_access_key = {REDACTED}",
    f"DB_PASSWORD={REDACTED}",
    f"npm_{REDACTED} sk_live_{REDACTED}",
    f"https://{REDACTED}",
)


@dataclass(frozen=True)
class Rule:
    """One secret pattern. ``pattern`` is the expanded Rust regex (fragments substituted)."""

    id: str
    pass_name: RulePassName
    description: str
    pattern: str
    keep_prefix: bool  # group 1 is written back before the marker
    keep_suffix: bool  # group 2 is written back after the marker
    #: literals every match holds: a rule that starts with a character class (``[0-9]{10}:AA…``)
    #: runs alone, after the passes, on the rows that hold one, so that every branch of the
    #: passes still starts with a literal
    literals: tuple[str, ...] = ()

    @property
    def group_count(self) -> int:
        return int(self.keep_prefix) + int(self.keep_suffix)


@dataclass(frozen=True)
class Pass:
    """One ``str.replace_all`` over the text: a combined alternation and its replacement."""

    name: RulePassName
    pattern: str
    replacement: str


@dataclass(frozen=True)
class RuleSet:
    """Validated rules (in pass order) and the combined patterns built from them."""

    rules: tuple[Rule, ...]
    passes: tuple[Pass, ...]
    any_pattern: str  # every rule in one alternation: counts leftovers
    source: str
    context: tuple[ContextRule, ...] = ()  # entropy-gated keyword rules, after the passes
    external: SourceRules | None = None  # a maintained rule set's, after the passes
    encoded: tuple[EncodedRule, ...] = ()  # base64 runs holding a secret, after the above
    #: rules with ``literals``, each run on its own on the rows that hold one, after the
    #: encoded pass (with the pass it replaces with)
    alone: tuple[tuple[Rule, Pass], ...] = ()
    after_rules: tuple[Rule, ...] = ()  # ``pass = "after"``: last, on the text as redacted
    after: Pass | None = None  # their combined pattern
    #: every rule above in one Hyperscan database (``redact_prefilter``), attached by
    #: ``memkiln.io.rules``: which rows each rule may match, in one scan; None: the regexes
    #: find the rows themselves (the same redaction)
    prefilter: Prefilter | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        external = self.external.rule_ids if self.external else ()
        return (
            tuple(rule.id for rule in self.rules)
            + external
            + tuple(rule.id for rule in self.context)
            + tuple(rule.id for rule in self.encoded)
            + tuple(rule.id for rule, _ in self.alone)
            + tuple(rule.id for rule in self.after_rules)
        )


# -- loading ---------------------------------------------------------------------------------


#: Reads a maintained rule set's text: ``() -> (version, text)`` (``memkiln.io.rules``
#: passes the reader of the installed Betterleaks; a test may pass its own).
SourceReader = Callable[[], tuple[str, str]]


def packaged_rules_text() -> str:
    """The text of the packaged ``secret_rules.toml``."""
    resource = importlib.resources.files(__package__ or "memkiln.transforms") / _RULES_RESOURCE
    return resource.read_text(encoding="utf-8")


def parse_rules(text: str, *, source: str, read_source: SourceReader) -> RuleSet:
    """Parse and validate a rules file's text; ``read_source`` is called when it names a
    maintained rule set (its ``[source]`` table)."""
    return _parse_rules(text, source=source, read_source=read_source)


def _parse_rules(text: str, *, source: str, read_source: SourceReader) -> RuleSet:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{source}: not valid TOML: {err}") from err
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"{source}: unknown top-level keys {sorted(unknown)}")
    fragments = _expand_fragments(data.get("fragments", {}), source=source)
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise ValueError(f"{source}: expected a non-empty [[rules]] array")

    rules: list[Rule] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rules):
        rule = _parse_rule(raw, index=index, fragments=fragments, source=source)
        if rule.id in seen:
            raise ValueError(f"{source}: rule {rule.id!r}: duplicate id")
        seen.add(rule.id)
        rules.append(rule)
    after = [rule for rule in rules if rule.pass_name == "after"]
    alone = [rule for rule in rules if rule.literals and rule.pass_name != "after"]
    rules = [rule for rule in rules if rule.pass_name != "after" and not rule.literals]
    if not rules:
        raise ValueError(f"{source}: expected a rule in a pass other than 'after'")
    rules.sort(key=lambda rule: RULE_PASSES.index(rule.pass_name))  # stable: file order per pass

    rule_set = RuleSet(
        rules=tuple(rules),
        passes=tuple(_build_pass(name, rules) for name in PASS_ORDER if _in_pass(name, rules)),
        any_pattern=_alternation(rule.pattern for rule in rules),
        source=source,
        context=tuple(parse_context_rule(raw, source=source) for raw in data.get("context", [])),
        encoded=tuple(parse_encoded_rule(raw, source=source) for raw in data.get("encoded", [])),
        after_rules=tuple(after),
        alone=tuple((rule, _build_pass(rule.pass_name, [rule])) for rule in alone),
        after=_build_pass("after", after) if after else None,
    )
    external = _parse_source(
        data.get("source"), context=rule_set.context, source=source, read_source=read_source
    )
    rule_set = dataclasses.replace(rule_set, external=external)
    _check_combined(rule_set)
    return rule_set


def _parse_source(
    raw: Any, *, context: tuple[ContextRule, ...], source: str, read_source: SourceReader
) -> SourceRules | None:
    """The ``[source]`` table: the maintained rule set to run after the passes, if any."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - _SOURCE_KEYS:
        raise ValueError(f"{source}: [source] must be a table of {sorted(_SOURCE_KEYS)}")
    if raw.get("name") != "betterleaks":
        raise ValueError(f"{source}: [source] name must be 'betterleaks', got {raw.get('name')!r}")
    lists = {key: raw.get(key, []) for key in ("exclude", "gated")}
    for key, ids in lists.items():
        if not isinstance(ids, list) or not all(isinstance(e, str) for e in ids):
            raise ValueError(f"{source}: [source] {key} must be a list of rule ids")
    if lists["gated"] and not context:
        raise ValueError(f"{source}: [source] gated needs a [[context]] rule, whose gate it uses")
    min_keyword_length = raw.get("min_keyword_length", 1)
    if not isinstance(min_keyword_length, int) or min_keyword_length < 1:
        raise ValueError(f"{source}: [source] min_keyword_length must be a positive integer")
    version, config = read_source()
    return _betterleaks_rules(
        version,
        config,
        tuple(lists["exclude"]),
        tuple(lists["gated"]),
        context[0] if context else None,
        min_keyword_length,
    )


@functools.cache
def _betterleaks_rules(
    version: str,
    config: str,
    exclude: tuple[str, ...],
    gated: tuple[str, ...],
    gate: ContextRule | None,
    min_keyword_length: int,
) -> SourceRules:
    return parse_betterleaks(
        config,
        name=f"betterleaks {version}",
        exclude=exclude,
        gated=gated,
        gate=gate,
        min_keyword_length=min_keyword_length,
    )


def _expand_fragments(raw: Any, *, source: str) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: [fragments] must be a table of strings")
    fragments: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise ValueError(f"{source}: fragment {name!r} must be a string")
        fragments[name] = _substitute(value, fragments, where=f"fragment {name!r}", source=source)
    return fragments


def _substitute(pattern: str, fragments: Mapping[str, str], *, where: str, source: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"{source}: {where}: unknown fragment {{{{{name}}}}}")
        return fragments[name]

    return _FRAGMENT_REF.sub(replace, pattern)


def _parse_rule(raw: Any, *, index: int, fragments: Mapping[str, str], source: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: rules[{index}] must be a table")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not _RULE_ID.match(rule_id):
        raise ValueError(
            f"{source}: rules[{index}]: id must be lower-case kebab-case, got {rule_id!r}"
        )
    where = f"rule {rule_id!r}"
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise ValueError(f"{source}: {where}: unknown keys {sorted(unknown)}")
    pass_name = raw.get("pass")
    if pass_name not in RULE_PASSES:
        raise ValueError(f"{source}: {where}: pass must be one of {RULE_PASSES}, got {pass_name!r}")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"{source}: {where}: description must be a string")
    regex = raw.get("regex")
    if not isinstance(regex, str) or not regex.strip():
        raise ValueError(f"{source}: {where}: regex must be a non-empty string")

    pattern = _substitute(regex, fragments, where=where, source=source)
    groups = _compile_groups(pattern, where=where, source=source)
    if groups not in (["1"], ["1", "2"]) and groups:
        raise ValueError(
            f"{source}: {where}: use at most two unnamed capture groups "
            f"(1 = kept prefix, 2 = kept suffix), found {groups}"
        )
    if pass_name == "keyed" and not groups:
        raise ValueError(f"{source}: {where}: a keyed rule must keep its key in group 1")
    _check_matches_nothing_redacted(pattern, where=where, source=source)
    return Rule(
        id=rule_id,
        pass_name=pass_name,
        description=description,
        pattern=pattern,
        keep_prefix=len(groups) >= 1,
        keep_suffix=len(groups) == 2,
        literals=_literals(raw.get("literals", []), where=where, source=source),
    )


def _literals(raw: Any, *, where: str, source: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(k, str) and k for k in raw):
        raise ValueError(f"{source}: {where}: literals must be a list of non-empty strings")
    return tuple(raw)


def _compile_groups(pattern: str, *, where: str, source: str) -> list[str]:
    """Compile ``pattern`` with the regex engine Polars uses; return its capture group names."""
    try:
        dtype = pl.Series([""], dtype=pl.String).str.extract_groups(pattern).dtype
    except ComputeError as err:
        raise ValueError(f"{source}: {where}: regex does not compile: {err}") from err
    if not isinstance(dtype, pl.Struct):  # pragma: no cover - extract_groups always gives a struct
        raise TypeError(f"unexpected dtype {dtype} from str.extract_groups")
    return [field.name for field in dtype.fields]


def _check_matches_nothing_redacted(pattern: str, *, where: str, source: str) -> None:
    probes = pl.Series(["", *_ALREADY_REDACTED], dtype=pl.String)
    hits = probes.filter(probes.str.contains(pattern)).to_list()
    if hits:
        raise ValueError(
            f"{source}: {where}: regex matches the empty string or already-redacted text "
            f"{hits[0]!r}"
        )


def _in_pass(name: RulePassName, rules: Sequence[Rule]) -> bool:
    return any(rule.pass_name == name for rule in rules)


def _alternation(patterns: Iterable[str]) -> str:
    return "|".join(f"(?:{pattern})" for pattern in patterns)


def _build_pass(name: RulePassName, rules: Sequence[Rule]) -> Pass:
    members = [rule for rule in rules if rule.pass_name == name]
    prefixes: list[str] = []
    suffixes: list[str] = []
    offset = 0
    for rule in members:
        if rule.keep_prefix:
            prefixes.append(f"${{{offset + 1}}}")
        if rule.keep_suffix:
            suffixes.append(f"${{{offset + 2}}}")
        offset += rule.group_count
    replacement = "".join(prefixes) + REDACTED + "".join(suffixes)
    return Pass(
        name=name, pattern=_alternation(r.pattern for r in members), replacement=replacement
    )


def _check_combined(rule_set: RuleSet) -> None:
    probe = pl.Series([""], dtype=pl.String)
    for pattern, where in [(p.pattern, f"pass {p.name!r}") for p in rule_set.passes] + [
        (rule_set.any_pattern, "combined rule set")
    ]:
        try:
            probe.str.contains(pattern)
        except ComputeError as err:  # e.g. the compiled size limit
            raise ValueError(f"{rule_set.source}: {where}: regex does not compile: {err}") from err


# -- expressions -----------------------------------------------------------------------------


#: A JSON escape of a printable ASCII character other than the quote and the backslash, or an
#: escaped solidus, behind a run of backslashes of any length: ``\u0041`` in a string,
#: ``\\u0041`` in a string inside a string (a tool's arguments), and so on.
_ESCAPED_ASCII = r"\\+(u00(?:2[013-9a-fA-F]|[346][0-9a-fA-F]|5[0-9abd-fABD-F]|7[0-9a-eA-E])|/)"
_ASCII_CODES = [c for c in range(0x20, 0x7F) if c not in (0x22, 0x5C)]
_ASCII_ESCAPES = [f"\\u00{c:02x}" for c in _ASCII_CODES] + ["\\/"]
_ASCII_CHARS = [chr(c) for c in _ASCII_CODES] + ["/"]


def unescape_expr(expr: pl.Expr) -> pl.Expr:
    """``expr`` with JSON escapes of printable ASCII characters written as the characters.

    A secret spelled ``\u0041KIA…`` (or ``\\u0041KIA…`` one string deeper) is a secret once
    decoded, so the rules must see it decoded. A whole run of backslashes before ``u00XX`` (or
    before ``/``) is taken with the escape, so a valid JSON text stays valid JSON: the quote and
    the backslash are never unescaped, and no escape is left half. Text without such escapes is
    unchanged.
    """
    return expr.map_batches(unescape_series, return_dtype=pl.String, is_elementwise=True)


#: Every text :func:`unescape_series` changes holds one of the escapes it decodes (the
#: replace_many step reads ``\U0041`` too, ASCII case-insensitively); ``\u001b`` (an ANSI
#: colour code, in most tool outputs) is not one of them.
_UNESCAPE_ROWS = r"(?i-u:\\u00(?:2[013-9a-f]|[346][0-9a-f]|5[0-9abd-f]|7[0-9a-e]))|\\/"


def unescape_series(series: pl.Series) -> pl.Series:
    """:func:`unescape_expr` on a series: only the rows that hold an escape are rewritten."""
    return rewrite_rows(series, series.str.contains(_UNESCAPE_ROWS), _unescape_all)


def _unescape_all(series: pl.Series) -> pl.Series:
    return series.str.replace_all(_ESCAPED_ASCII, r"\${1}").str.replace_many(
        _ASCII_ESCAPES, _ASCII_CHARS, ascii_case_insensitive=True
    )


def rewrite_rows(
    series: pl.Series, hit: pl.Series, rewrite: Callable[[pl.Series], pl.Series]
) -> pl.Series:
    """``series`` with ``rewrite`` applied to the rows where ``hit`` is true, the others kept
    as they are (not copied: a ``replace_all`` over every row writes every byte again)."""
    hit = hit.fill_null(False)
    n = int(hit.sum())
    if n == 0:
        return series
    if n == len(series):
        return rewrite(series)
    return series.clone().scatter(hit.arg_true(), rewrite(series.filter(hit)))


def redact_expr(expr: pl.Expr, *, rules: RuleSet, unescape: bool = True) -> pl.Expr:
    """``expr`` (a string expression) with every secret replaced by ``[REDACTED_SECRET]``.

    The text is first decoded with :func:`unescape_expr` (pass ``unescape=False`` when it
    already is), so secrets spelled with JSON escapes are found too.
    """
    return expr.map_batches(
        functools.partial(redact_series, rules=rules, unescape=unescape),
        return_dtype=pl.String,
        is_elementwise=True,
    )


def redact_series(series: pl.Series, *, rules: RuleSet, unescape: bool = True) -> pl.Series:
    """:func:`redact_expr` on a series.

    Each step rewrites only the rows it changes: the regex passes run on the rows where one of
    their rules matches (a row none matches is left as it is by all three), the maintained rule
    set's and the key-word passes on the rows their key words reach.
    """
    return _redact(series, rules=rules, unescape=unescape)[0]


def redact_counted_series(
    series: pl.Series, *, rules: RuleSet, unescape: bool = True, scan: Scan | None = None
) -> tuple[pl.Series, dict[str, int]]:
    """:func:`redact_series`, and the replaced spans per rule, as :func:`rule_hit_counts`
    gives them for the text before redaction (a dict in rule order, rules that replaced
    nothing left out), counted while redacting instead of by a second redaction of the
    changed texts. ``scan``: the rule set's prefilter's scan of ``series`` when the caller
    made it already (``unescape`` must then be False)."""
    text, hits = _redact(series, rules=rules, unescape=unescape, count=True, scan=scan)
    assert hits is not None
    return text, _in_rule_order(hits, rules)


def redact_frame_counted(
    frame: pl.DataFrame, columns: Sequence[str], *, rules: RuleSet, unescape: bool = True
) -> tuple[pl.DataFrame, dict[str, int]]:
    """``frame`` with the string ``columns`` redacted in place, and the hits per rule over all
    of them: :func:`redact_counted_series` of the columns one after the other, in one series
    (one search per rule for the whole frame, not one per column)."""
    if not columns:
        return frame, {}
    stacked = pl.concat([frame[name].cast(pl.String) for name in columns], rechunk=False)
    text, hits = redact_counted_series(stacked, rules=rules, unescape=unescape)
    height = frame.height
    return frame.with_columns(
        text.slice(i * height, height).rename(name) for i, name in enumerate(columns)
    ), hits


def _in_rule_order(hits: Mapping[str, int], rules: RuleSet) -> dict[str, int]:
    order = {rule_id: i for i, rule_id in enumerate(rules.rule_ids)}
    return dict(sorted(hits.items(), key=lambda kv: order[kv[0]]))


def _redact(
    series: pl.Series,
    *,
    rules: RuleSet,
    unescape: bool,
    count: bool = False,
    scan: Scan | None = None,
) -> tuple[pl.Series, dict[str, int] | None]:
    """The text redacted and, with ``count``, the hits per rule (see :func:`_hits_of`, which
    this follows step by step)."""
    hits: dict[str, int] | None = {} if count else None
    if series.dtype != pl.String:
        series = series.cast(pl.String)
    if series.null_count() == len(series):
        return series, hits
    if unescape:
        series = unescape_series(series)
    if scan is None:
        scan = _scan(series, rules)
    else:
        if unescape or scan.text is not series:
            raise ValueError("a scan given to redaction must be of the series, not unescaped")
    flagged = scan.mask(scan.prefilter.plan.pass_ids) if scan else flag_rows(series, rules)
    if hits is None:
        series = rewrite_rows(series, flagged, functools.partial(_passes, rules=rules))
    else:
        series = rewrite_rows(
            series, flagged, functools.partial(_counted_passes, rules=rules, hits=hits)
        )
    series, alone = _alone_steps(series, rules, scan)
    if hits is not None:
        hits |= alone
    if rules.external:
        routed = scan.source_routing(series) if scan else None
        series, source = redact_source_with_hits(series, rules.external, REDACTED, routed=routed)
        if hits is not None:
            hits |= source
    if rules.context:
        candidates = _candidates(scan, scan.prefilter.plan.context_ids) if scan else None
        series, context = redact_context_with_hits(
            series, rules.context, REDACTED, candidates=candidates
        )
        if hits is not None:
            hits |= context
    series, last = _last_steps(series, rules, scan)
    if hits is not None:
        hits |= last
    return series, hits


def _scan(series: pl.Series, rules: RuleSet) -> Scan | None:
    """The prefilter's scan of ``series`` when the rule set has a prefilter made for it."""
    prefilter = rules.prefilter
    if prefilter is None or not plan_fits(prefilter.plan, rules):
        return None
    return prefilter.scan(series)


def _candidates(
    scan: Scan, ids: Sequence[int | frozenset[int]]
) -> Callable[[int, pl.Series], pl.Series]:
    """Rule ``i`` of a step (its id, or the ids of its pieces) -> the rows of the text as it
    now is that it may match."""

    def rows(i: int, series: pl.Series) -> pl.Series:
        wanted = ids[i]
        return scan.sync(series).mask(wanted if isinstance(wanted, frozenset) else (wanted,))

    return rows


def _without_encoded(rules: RuleSet) -> Callable[[pl.Series], pl.Series]:
    """The redaction a decoded base64 text gets: the whole rule set but the encoded pass."""
    inner = dataclasses.replace(rules, encoded=())
    return lambda texts: _redact(texts, rules=inner, unescape=True)[0]


def _alone_steps(
    series: pl.Series, rules: RuleSet, scan: Scan | None = None
) -> tuple[pl.Series, dict[str, int]]:
    """The rules that run alone (they start with a character class), right after the passes
    they belong to and before the maintained rules and the key-word rule, so that a token they
    take whole (``launchdarkly-private-<uuid>``) is not first cut by a key word inside it; the
    hits of each. With a prefilter's ``scan``, each looks only at the rows it may match."""
    hits: dict[str, int] = {}
    for index, (rule, alone) in enumerate(rules.alone):
        if scan is None:  # the rows holding a literal (one search), then the regex on those
            held = series.str.contains_any(list(rule.literals)).fill_null(False)
            if held.any():
                held = _confirm_rows(series, held.arg_true().to_list(), alone.pattern, ())
        else:
            rows = scan.sync(series).rows((scan.prefilter.plan.alone_ids[index],))
            held = _confirm_rows(series, rows, alone.pattern, rule.literals)
        if held.any():
            spans = series.filter(held).str.extract_all(alone.pattern).explode()
            hits[rule.id] = int(spans.drop_nulls().len())
            series = rewrite_rows(
                series,
                held,
                functools.partial(_replace_all, pattern=alone.pattern, by=alone.replacement),
            )
    return series, hits


def _last_steps(
    series: pl.Series, rules: RuleSet, scan: Scan | None = None
) -> tuple[pl.Series, dict[str, int]]:
    """The encoded pass, then the ``after`` rules, on the text every earlier step redacted;
    the hits of each. With a prefilter's ``scan``, each looks only at the rows it may match."""
    hits: dict[str, int] = {}
    if rules.encoded:
        series, hits = redact_encoded_with_hits(
            series,
            rules.encoded,
            REDACTED,
            _without_encoded(rules),
            candidates=_candidates(scan, scan.prefilter.plan.encoded_ids) if scan else None,
        )
    after = rules.after
    # the rows an after rule may match: all, or those the prefilter reports; then the rows the
    # last round changed (a row it did not change matches no more than it did)
    maybe: pl.Series | None = None
    if after is not None and scan is not None:
        maybe = scan.sync(series).mask(scan.prefilter.plan.after_ids)
    while after is not None:  # until no match: a marker so written may start a match in turn
        if maybe is None:
            flagged = series.str.contains(after.pattern).fill_null(False)
        else:
            flagged = _confirm_rows(series, maybe.arg_true().to_list(), after.pattern, ())
        if not flagged.any():
            break
        maybe = flagged
        spans = series.filter(flagged).str.extract_all(after.pattern).explode().drop_nulls()
        for rule_id, n in _spans_per_rule(spans, rules.after_rules).items():
            hits[rule_id] = hits.get(rule_id, 0) + n
        series = rewrite_rows(
            series, flagged, lambda rows: rows.str.replace_all(after.pattern, after.replacement)
        )
    return series, hits


def _confirm_rows(
    series: pl.Series, rows: Sequence[int], pattern: str, literals: Sequence[str]
) -> pl.Series:
    """A mask of ``series``: the ``rows`` that ``pattern`` matches and that hold one of
    ``literals`` (when given), as the regex alone finds them."""
    if not rows:
        return mask_of((), len(series))
    texts = series.gather(rows)
    found = texts.str.contains(pattern).fill_null(False)
    if literals:
        found = found & texts.str.contains_any(list(literals)).fill_null(False)
    hit = [row for row, yes in zip(rows, found.to_list(), strict=True) if yes]
    return mask_of(hit, len(series))


def _replace_all(series: pl.Series, *, pattern: str, by: str) -> pl.Series:
    return series.str.replace_all(pattern, by)


def flag_rows(series: pl.Series, rules: RuleSet) -> pl.Series:
    """The rows one of the passes' rules matches (null rows: false): the rows
    ``rules.any_pattern`` matches, searched with :func:`flag_patterns` one after the other."""
    found = pl.Series(series.name, [False] * len(series), dtype=pl.Boolean)
    for pattern in flag_patterns(rules):
        found = found | series.str.contains(pattern).fill_null(False)
    return found


#: Key-value rules per alternation when rows are flagged (measured on session rows: the 28 rules
#: of the keyed pass in one alternation 0.105 CPU-s, in two 0.064, in three 0.073).
FLAG_GROUP = 16


def flag_patterns(rules: RuleSet) -> tuple[str, ...]:
    """The alternations that flag rows together as ``rules.any_pattern`` alone would: one per
    pass, the keyed pass in groups of ``FLAG_GROUP`` rules. The whole rule set in one
    alternation outgrows the regex engine's lazy-automaton cache (2.8 times slower on
    session rows than these, ``bench/RESULTS.md``); the token pass, literal-led, is fastest
    whole."""
    return _flag_patterns(rules.rules)


@functools.cache
def _flag_patterns(rules: tuple[Rule, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for name in PASS_ORDER:
        members = [rule.pattern for rule in rules if rule.pass_name == name]
        size = FLAG_GROUP if name == "keyed" else max(len(members), 1)
        out += [_alternation(members[i : i + size]) for i in range(0, len(members), size)]
    return tuple(out)


def _passes(series: pl.Series, rules: RuleSet) -> pl.Series:
    for rule_pass in rules.passes:
        series = series.str.replace_all(rule_pass.pattern, rule_pass.replacement)
    return series


def _counted_passes(series: pl.Series, rules: RuleSet, hits: dict[str, int]) -> pl.Series:
    """:func:`_passes`, adding the spans each pass replaces to ``hits`` (per rule)."""
    for rule_pass in rules.passes:
        spans = series.str.extract_all(rule_pass.pattern).explode().drop_nulls()
        members = [rule for rule in rules.rules if rule.pass_name == rule_pass.name]
        hits |= _spans_per_rule(spans, members)
        series = series.str.replace_all(rule_pass.pattern, rule_pass.replacement)
    return series


def redact_secrets(lf: pl.LazyFrame, *, columns: Sequence[str], rules: RuleSet) -> pl.LazyFrame:
    """Redact the given string columns in place (same names, same order)."""
    return lf.with_columns(redact_expr(pl.col(name), rules=rules) for name in columns)


def secret_count_expr(expr: pl.Expr, *, rules: RuleSet) -> pl.Expr:
    """Number of matches of the whole rule set in ``expr`` (0 for null); 0 after redaction."""
    return expr.str.count_matches(rules.any_pattern).fill_null(0)


def rule_hit_counts(lf: pl.LazyFrame, *, column: str, rules: RuleSet) -> pl.LazyFrame:
    """One row per rule that redacted something in ``column``: ``rule_id`` (str), ``hits`` (i64).

    Give it the text before redaction. Every replaced span counts once, for the rule that
    replaced it: pass by pass, the spans the pass's alternation matches (in the text as the
    earlier passes left it) go to the first rule of the pass that matches at the span's start
    (else the first that matches inside it). Only rows the combined pattern flags are looked at,
    and the per-rule tests run on the short spans not yet given to a rule, not on the (often
    long) rows. The maintained rule set's and the key-word passes count what they replace in
    the text the passes left. Rows follow the rule order (pass by pass, file order within a
    pass).
    """
    schema = {"rule_id": pl.String, "hits": pl.Int64}

    def count(frame: pl.DataFrame) -> pl.DataFrame:
        found = _hits_of(frame["text"], rules)
        return pl.DataFrame({"rule_id": list(found), "hits": list(found.values())}, schema=schema)

    order = pl.LazyFrame(
        {"rule_id": list(rules.rule_ids), "order": list(range(len(rules.rule_ids)))},
        schema={"rule_id": pl.String, "order": pl.Int64},
    )
    return (
        lf.select(text=pl.col(column).cast(pl.String))
        .map_batches(count, schema=schema)
        .group_by("rule_id")
        .agg(hits=pl.col("hits").sum().cast(pl.Int64))
        .join(order, on="rule_id")
        .sort("order")
        .drop("order")
    )


def _hits_of(text: pl.Series, rules: RuleSet) -> dict[str, int]:
    """Replaced spans per rule in ``text`` (before redaction), rules that replaced nothing left
    out (the key-word pass may name a rule with 0)."""
    text = text.drop_nulls()
    found: dict[str, int] = {}
    flagged = flag_rows(text, rules)
    current = text.filter(flagged)
    for rule_pass in rules.passes:
        spans = current.str.extract_all(rule_pass.pattern).explode().drop_nulls()
        members = [rule for rule in rules.rules if rule.pass_name == rule_pass.name]
        found |= _spans_per_rule(spans, members)
        current = current.str.replace_all(rule_pass.pattern, rule_pass.replacement)
    if rules.context or rules.external or rules.encoded or rules.alone or rules.after:
        after = rewrite_rows(text, flagged, lambda _: current) if len(current) else text
        after, alone = _alone_steps(after, rules)
        found |= alone
        if rules.external:
            after, source = redact_source_with_hits(after, rules.external, REDACTED)
            found |= source
        if rules.context:
            after, context = redact_context_with_hits(after, rules.context, REDACTED)
            found |= context
        found |= _last_steps(after, rules)[1]
    return found


def _spans_per_rule(spans: pl.Series, members: Sequence[Rule]) -> dict[str, int]:
    """Each span goes to the first rule that matches at its start, else to the first that
    matches inside it (a rule whose match depends on the text around the span)."""
    counts: dict[str, int] = {}
    for anchored in (True, False):
        for rule in members:
            if spans.is_empty():
                return counts
            hit = spans.str.contains(f"^(?:{rule.pattern})" if anchored else rule.pattern)
            n = int(hit.sum())
            if n:
                counts[rule.id] = counts.get(rule.id, 0) + n
                spans = spans.filter(~hit)
    return counts


def redact_text(text: str, *, rules: RuleSet) -> str:
    """Redact one string (a log line, a CLI message) with the same Polars expression."""
    redacted = (
        pl.Series("text", [text], dtype=pl.String)
        .to_frame()
        .select(redact_expr(pl.col("text"), rules=rules))
    )
    return str(redacted.item())


def _prefilter_key(rules: RuleSet) -> tuple[object, ...]:
    external = rules.external
    return (
        rules.rules,
        tuple(rule for rule, _ in rules.alone),
        rules.after_rules,
        external.rules if external else None,
        external.keywords if external else None,
        rules.context,
        rules.encoded,
    )


def plan_prefilter(rules: RuleSet) -> Plan:
    """The expressions of a rule set's prefilter and the ids of each kind of rule."""
    expressions: list[str] = []
    literal: list[bool] = []

    def add(pattern: str, *, is_literal: bool = False) -> int:
        expressions.append(pattern if is_literal else to_hyperscan(pattern))
        literal.append(is_literal)
        return len(expressions) - 1

    pass_ids = frozenset(add(rule.pattern) for rule in rules.rules)
    alone_ids = tuple(add(rule.pattern) for rule, _ in rules.alone)
    after_ids = frozenset(add(rule.pattern) for rule in rules.after_rules)
    external = rules.external
    source_ids: tuple[int, ...] = ()
    source_keyword_ids: tuple[frozenset[int], ...] = ()
    keyword_ids: dict[str, int] = {}
    if external is not None:
        source_ids = tuple(add(rule.pattern) for rule in external.rules)
        keyword_ids = {k: add(k, is_literal=True) for k in external.keywords}
        source_keyword_ids = tuple(
            frozenset(keyword_ids[k] for k in rule.keywords) for rule in external.rules
        )
    context_ids = tuple(
        frozenset(add(piece) for piece in rule.row_filters()) for rule in rules.context
    )
    encoded_ids = tuple(add(rule.pattern) for rule in rules.encoded)
    return Plan(
        expressions=tuple(expressions),
        literal=tuple(literal),
        pass_ids=pass_ids,
        alone_ids=alone_ids,
        after_ids=after_ids,
        source_ids=source_ids,
        source_keyword_ids=source_keyword_ids,
        keyword_ids=frozenset(keyword_ids.values()),
        context_ids=context_ids,
        encoded_ids=encoded_ids,
        key=_prefilter_key(rules),
    )


def plan_fits(plan: Plan, rules: RuleSet) -> bool:
    """Was ``plan`` (a prefilter's) made for ``rules``?"""
    return plan.key == _prefilter_key(rules)
