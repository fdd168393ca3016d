"""Every redaction rule in one Hyperscan database: which rows each rule may match, in one scan.

Redaction runs many regexes over every row: memkiln's passes, Betterleaks' provider rules
behind their key words, the key-word context rule, the encoded and ``after`` rules. Here each
of them is translated to a Hyperscan expression that matches at least as much
(:mod:`memkiln.transforms.hs_syntax`) and compiled with ``HS_FLAG_PREFILTER`` (Hyperscan may
widen it further, never narrow it) and ``HS_FLAG_SINGLEMATCH`` into one database, beside
Betterleaks' key words as literals (ASCII-caseless, as its rules read them). One scan of a row
reports every rule that may match in it; the rules' full regexes, entropy floors and gates then
run only on the rows reported for them. A reported row the regex does not match is left as it
is, and a row a rule matches is always reported, so the redaction is the one the regexes alone
give: a test compares both on the session corpus and the fixtures.

The database is compiled once per rule set (seconds) and kept by ``memkiln.io.rules`` in the
cache directory as Hyperscan's serialized bytes; this module does no I/O. Without the
``hyperscan`` wheel :func:`available` is False and redaction runs its regex prefilters instead.

    plan = redact.plan_prefilter(rules)      # expressions and what each id stands for
    prefilter = compile_prefilter(plan)      # or Prefilter(plan, serialized)
    scan = prefilter.scan(series)            # rows -> ids that may match
    scan.rows(plan.pass_ids)                 # rows a pass rule may match
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = [
    "Plan", "Prefilter", "Scan", "available", "compile_database", "compile_prefilter", "mask_of",
    "version",
]  # fmt: skip

_hyperscan: Any
try:
    _hyperscan = importlib.import_module("hyperscan")
except ImportError:  # pragma: no cover - the wheel is a dependency; this is the fallback
    _hyperscan = None

#: Rows copied out of Polars at a time.
SLICE_ROWS = 4096


def available() -> bool:
    """Is Hyperscan installed?"""
    return _hyperscan is not None


def version() -> str:
    """The Hyperscan wheel's version and the flags of the database (a cache's key)."""
    return f"hyperscan {getattr(_hyperscan, '__version__', '?')} utf8-prefilter-singlematch v1"


@dataclass(frozen=True)
class Plan:
    """The database's expressions (id = index) and the ids of each kind of rule."""

    expressions: tuple[str, ...]
    literal: tuple[bool, ...]  # a key word: matched as written, ASCII-caseless
    pass_ids: frozenset[int]  # memkiln's block/token/keyed rules
    alone_ids: tuple[int, ...]  # per ``rules.alone``
    after_ids: frozenset[int]
    source_ids: tuple[int, ...]  # per Betterleaks rule
    source_keyword_ids: tuple[frozenset[int], ...]  # per Betterleaks rule: its key words
    keyword_ids: frozenset[int]  # every Betterleaks key word
    context_ids: tuple[frozenset[int], ...]  # per context rule: its row filter's pieces
    encoded_ids: tuple[int, ...]  # per encoded rule
    #: the rule set's parts the ids stand for, to check a prefilter against a rule set
    key: tuple[object, ...]


def _literal_expression(literal: str) -> str:
    """A key word as a Hyperscan expression: letters and digits as they are, every other
    character as a hex escape."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in literal)


#: What an expression Hyperscan refuses becomes: any character (every row that is not empty
#: goes to that rule's regex, as without a prefilter).
ANY_ROW = r"[\x{0}-\x{10ffff}]"


def compile_database(plan: Plan) -> tuple[Any, tuple[int, ...]]:
    """The Hyperscan database of ``plan`` and the ids of the expressions it refused (each
    compiled as any character instead)."""
    hs = _hyperscan
    assert hs is not None
    regex = hs.HS_FLAG_PREFILTER | hs.HS_FLAG_UTF8 | hs.HS_FLAG_SINGLEMATCH
    keyword = hs.HS_FLAG_CASELESS | hs.HS_FLAG_SINGLEMATCH
    expressions = [
        _literal_expression(e) if lit else e
        for e, lit in zip(plan.expressions, plan.literal, strict=True)
    ]
    flags = [keyword if lit else regex for lit in plan.literal]

    def database_of(chosen: Sequence[str], flags_of: Sequence[int]) -> Any:
        database = hs.Database(mode=hs.HS_MODE_BLOCK)
        database.compile(
            expressions=[e.encode("utf-8") for e in chosen],
            ids=list(range(len(chosen))),
            elements=len(chosen),
            flags=list(flags_of),
        )
        return database

    try:
        return database_of(expressions, flags), ()
    except hs.error:  # one expression refused: each alone, the refused ones as any row
        refused: list[int] = []
        for i, expression in enumerate(expressions):
            try:
                database_of([expression], [flags[i]])
            except hs.error:
                expressions[i], flags[i] = ANY_ROW, regex
                refused.append(i)
        return database_of(expressions, flags), tuple(refused)


class Prefilter:
    """A compiled plan. Pickles as its serialized database (a task runner's worker loads it);
    each thread scans with its own scratch space."""

    def __init__(self, plan: Plan, serialized: bytes | None = None) -> None:
        hs = _hyperscan
        if hs is None:
            raise RuntimeError("hyperscan is not installed")
        self.plan = plan
        if serialized is None:
            self._database = compile_database(plan)[0]
        else:
            try:
                self._database = hs.loadb(serialized, hs.HS_MODE_BLOCK)
            except hs.error as err:
                raise ValueError(f"not a serialized Hyperscan database: {err}") from err
        self._local = threading.local()

    def serialize(self) -> bytes:
        return bytes(_hyperscan.dumpb(self._database))

    def __getstate__(self) -> tuple[Plan, bytes]:
        return self.plan, self.serialize()

    def __setstate__(self, state: tuple[Plan, bytes]) -> None:
        plan, serialized = state
        self.__init__(plan, serialized)  # type: ignore[misc]

    def _scratch(self) -> Any:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hyperscan.Scratch(self._database)
        return scratch

    def ids_of(self, texts: Iterable[str | None]) -> list[frozenset[int]]:
        """The ids that may match in each text (empty for None)."""
        scratch = self._scratch()
        found: set[int] = set()
        out: list[frozenset[int]] = []
        empty: frozenset[int] = frozenset()

        def hit(expression_id: int, *_: object) -> None:
            found.add(expression_id)

        for text in texts:
            if text:
                self._database.scan(text.encode("utf-8", "surrogatepass"), hit, scratch=scratch)
            if found:
                out.append(frozenset(found))
                found.clear()
            else:
                out.append(empty)
        return out

    def ids_of_bytes(self, rows: Sequence[bytes]) -> dict[int, frozenset[int]]:
        """Index -> the ids that may match, for the ``rows`` (valid UTF-8) with any."""
        scratch = self._scratch()
        found: set[int] = set()
        out: dict[int, frozenset[int]] = {}

        def hit(expression_id: int, *_: object) -> None:
            found.add(expression_id)

        for index, row in enumerate(rows):
            self._database.scan(row, hit, scratch=scratch)
            if found:
                out[index] = frozenset(found)
                found.clear()
        return out

    def scan(self, series: pl.Series) -> Scan:
        """Which ids may match in each row of ``series``. Each distinct text is scanned once
        (a batch's short columns, item types and roles, repeat a few values)."""
        distinct = series.drop_nulls().unique()
        found_in: dict[str, frozenset[int]] = {}
        for start in range(0, len(distinct), SLICE_ROWS):  # a slice at a time: bounded copies
            texts = distinct.slice(start, SLICE_ROWS).to_list()
            for text, found in zip(texts, self.ids_of(texts), strict=True):
                if found:
                    found_in[text] = found
        ids: dict[int, frozenset[int]] = {}
        if found_in:
            wanted = pl.Series(list(found_in), dtype=pl.String).implode()
            rows = series.is_in(wanted).fill_null(False)
            positions = rows.arg_true().to_list()
            for row, text in zip(positions, series.gather(positions).to_list(), strict=True):
                ids[row] = found_in[text]
        return Scan(self, series, ids)


@dataclass
class Scan:
    """The ids that may match in each row of a series (rows with none left out); kept up to
    date with :meth:`update` as redaction rewrites rows."""

    prefilter: Prefilter
    text: pl.Series  # what the ids describe
    ids: dict[int, frozenset[int]]

    @property
    def height(self) -> int:
        return len(self.text)

    def sync(self, series: pl.Series) -> Scan:
        """The scan of ``series``, a rewrite of the text scanned: the rows that changed are
        scanned again."""
        if series is not self.text:
            self.update(self.text, series)
            self.text = series
        return self

    def source_routing(self, series: pl.Series) -> tuple[pl.Series, dict[int, list[int]]]:
        """For Betterleaks' pass on ``series``: the rows holding one of its key words, and
        per rule the rows among them (numbered among those rows) where it may match and one
        of its own key words is."""
        self.sync(series)
        plan = self.prefilter.plan
        rule_of = {sid: index for index, sid in enumerate(plan.source_ids)}
        rows = self.rows(plan.keyword_ids)
        rows_of: dict[int, list[int]] = {}
        for position, row in enumerate(rows):
            found = self.ids[row]
            for sid in found:
                index = rule_of.get(sid)
                if index is not None and found & plan.source_keyword_ids[index]:
                    rows_of.setdefault(index, []).append(position)
        return mask_of(rows, self.height), dict(sorted(rows_of.items()))

    def rows(self, wanted: frozenset[int] | Sequence[int]) -> list[int]:
        """Rows (ascending) where one of ``wanted`` may match."""
        wanted = frozenset(wanted)
        return [row for row, found in sorted(self.ids.items()) if found & wanted]

    def mask(self, wanted: frozenset[int] | Sequence[int]) -> pl.Series:
        """:meth:`rows` as a boolean series of the scanned height."""
        return mask_of(self.rows(wanted), self.height)

    def update(self, before: pl.Series, after: pl.Series) -> None:
        """Scan again the rows that differ between ``before`` and ``after``."""
        changed = before.ne_missing(after).fill_null(False)
        if not changed.any():
            return
        rows = changed.arg_true().to_list()
        texts = after.gather(rows).to_list()
        for row, found in zip(rows, self.prefilter.ids_of(texts), strict=True):
            if found:
                self.ids[row] = found
            else:
                self.ids.pop(row, None)


def mask_of(rows: Sequence[int], height: int) -> pl.Series:
    """A boolean series of ``height`` rows, true at ``rows``."""
    mask = pl.repeat(False, height, dtype=pl.Boolean, eager=True)
    if rows:
        mask = mask.scatter(list(rows), True)
    return mask


def compile_prefilter(plan: Plan) -> Prefilter | None:
    """The plan compiled, or None without Hyperscan."""
    if _hyperscan is None:
        return None
    with contextlib.suppress(_hyperscan.error):
        return Prefilter(plan)
    return None  # pragma: no cover - every rule translates and compiles (a test checks)
