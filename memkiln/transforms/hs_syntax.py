"""A Rust ``regex`` pattern written as a Hyperscan expression that matches at least as much.

Hyperscan reads PCRE syntax; the redaction rules are Rust ``regex`` syntax (Polars' engine):
``(?-u:\\b)``, class set operations ``[[^ \\t]--[0-9]]``, Unicode ``\\w``, case folding of
``k`` and ``s`` to the Kelvin sign and the long s. The translation is used only as a prefilter
(compiled with ``HS_FLAG_PREFILTER``: Hyperscan may widen it further), so it needs to be a
superset, never exact:

* assertions (``^ $ \\b \\B \\A \\z``) are dropped: an assertion only ever removes matches;
* ``A--B`` and ``A&&B`` become ``A``, ``A~~B`` becomes ``A`` and ``B``; a class the
  translation cannot write as one bracket (a negated class inside a union, ``\\p{…}``)
  becomes any character;
* ``\\w \\d \\s`` (Unicode in Rust, ASCII in Hyperscan without UCP) take every non-ASCII
  character too; ``\\W \\D \\S`` are wider in ASCII mode already;
* under ``(?i)`` a ``k`` or ``s`` (and every bracket) also takes U+212A and U+017F;
* the flags Hyperscan lacks (``u``, ``U``, ``R``) are dropped, group names too, lazy
  quantifiers become greedy (the same strings match), and every other literal character is
  written as ``\\x{…}``.

    to_hyperscan(pattern) -> str
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Untranslatable", "to_hyperscan"]

_ANY = r"[\x{0}-\x{10ffff}]"
_NON_ASCII = r"\x{80}-\x{10ffff}"
_LONG_S = r"\x{17f}"  # what (?i) adds to ASCII letters in Rust: the long s for s,
_KELVIN = r"\x{212a}"  # the Kelvin sign for k
_FOLDS = _LONG_S + _KELVIN
_WIDE = {"w": r"\w" + _NON_ASCII, "d": r"\d" + _NON_ASCII, "s": r"\s" + _NON_ASCII}
_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}
_POSIX = {
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
    "space", "upper", "word", "xdigit",
}  # fmt: skip


class Untranslatable(ValueError):
    """The pattern uses syntax this translation does not read."""


def _code(c: str) -> str:
    return c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}"


@dataclass
class _Class:
    """A bracket's content as Hyperscan items, negated or not; ``exact``: no widening."""

    items: str
    negated: bool = False
    exact: bool = True
    any: bool = False

    def text(self, caseless: bool) -> str:
        if self.any:
            return _ANY
        folds = _FOLDS if caseless and not self.negated else ""
        if not self.items and not folds:  # an empty negated bracket: any character
            return _ANY if self.negated else r"[^\x{0}-\x{10ffff}]"
        return f"[{'^' if self.negated else ''}{self.items}{folds}]"


class _Reader:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def take(self) -> str:
        c = self.peek()
        if not c:
            raise Untranslatable("unexpected end of pattern")
        self.i += 1
        return c

    def starts(self, text: str) -> bool:
        return self.p.startswith(text, self.i)

    # -- escapes -------------------------------------------------------------------------

    def hex_escape(self) -> int:
        """After ``\\x``: ``{HHHH}`` or ``HH``."""
        if self.peek() == "{":
            end = self.p.find("}", self.i)
            if end < 0:
                raise Untranslatable("unclosed \\x{")
            value = int(self.p[self.i + 1 : end], 16)
            self.i = end + 1
            return value
        value = int(self.p[self.i : self.i + 2], 16)
        self.i += 2
        return value

    def class_escape(self) -> tuple[str, int | None, bool]:
        """After a ``\\`` in a bracket: (items, the code point when one character, any)."""
        c = self.take()
        if c in _WIDE:
            return _WIDE[c], None, False
        if c in "WDS":
            return f"\\{c}", None, False
        if c in "pP":
            self._skip_property()
            return "", None, True
        if c == "x":
            value = self.hex_escape()
            return f"\\x{{{value:x}}}", value, False
        if c in _SIMPLE_ESCAPES:
            value = _SIMPLE_ESCAPES[c]
            return f"\\x{{{value:x}}}", value, False
        if c.isalnum():
            raise Untranslatable(f"unknown escape \\{c}")
        return _code(c), ord(c), False

    def _skip_property(self) -> None:
        if self.peek() == "{":
            end = self.p.find("}", self.i)
            if end < 0:
                raise Untranslatable("unclosed \\p{")
            self.i = end + 1
        else:
            self.i += 1

    # -- brackets ------------------------------------------------------------------------

    def bracket(self) -> _Class:
        """After ``[``: the class up to its ``]``."""
        negated = False
        if self.peek() == "^":
            negated = True
            self.i += 1
        inner = self.class_set(first=True)
        if self.take() != "]":  # pragma: no cover - class_set stops only at ]
            raise Untranslatable("unclosed bracket")
        if not negated:
            return inner
        if inner.any or not inner.exact:
            return _Class("", any=True, exact=False)  # the complement of a widened set
        return _Class(inner.items, negated=not inner.negated, exact=True)

    def class_set(self, *, first: bool) -> _Class:
        """Operands joined by ``--``, ``&&``, ``~~`` up to the closing ``]``."""
        left = self.union(first=first)
        while self.starts("--") or self.starts("&&") or self.starts("~~"):
            op = self.p[self.i : self.i + 2]
            self.i += 2
            right = self.union(first=False)
            if op == "~~":
                left = _join([left, right])
            elif left.any:  # A && B with A widened to anything: B
                left = right if op == "&&" else left
                left = _Class(left.items, left.negated, exact=False, any=left.any)
            else:
                left = _Class(left.items, left.negated, exact=False, any=left.any)
        return left

    def union(self, *, first: bool) -> _Class:
        parts: list[_Class] = []
        items: list[str] = []
        any_char = False
        if first and self.peek() == "]":  # a ] first is a literal
            self.i += 1
            items.append(_code("]"))
        while True:
            c = self.peek()
            if not c:
                raise Untranslatable("unclosed bracket")
            if c == "]" or self.starts("--") or self.starts("&&") or self.starts("~~"):
                break
            if self.starts("[:"):
                end = self.p.find(":]", self.i)
                name = self.p[self.i + 2 : end].lstrip("^") if end > 0 else ""
                if end > 0 and name in _POSIX:
                    items.append(self.p[self.i : end + 2])
                    self.i = end + 2
                    continue
            if c == "[":
                self.i += 1
                parts.append(self.bracket())
                continue
            lo_items, lo, any_here = self.class_item()
            any_char = any_char or any_here
            if (
                lo is not None
                and self.peek() == "-"
                and self.peek(1) not in ("]", "-", "")
                and not self.starts("-&&")
            ):
                self.i += 1
                _, hi, _ = self.class_item()
                if hi is None:
                    raise Untranslatable("a range must end on one character")
                items.append(f"\\x{{{lo:x}}}-\\x{{{hi:x}}}")
                continue
            items.append(lo_items)
        own = _Class("".join(items), any=any_char, exact=not any_char)
        if not parts:
            return own
        if items or any_char:
            parts.append(own)
        return _join(parts)

    def class_item(self) -> tuple[str, int | None, bool]:
        c = self.take()
        if c == "\\":
            return self.class_escape()
        return _code(c), ord(c), False


def _join(parts: list[_Class]) -> _Class:
    """The union of bracket operands: one bracket when none is negated, else any character
    (or the one operand when it is alone)."""
    if len(parts) == 1:
        return parts[0]
    if any(p.any or p.negated for p in parts):
        return _Class("", any=True, exact=False)
    return _Class("".join(p.items for p in parts), exact=all(p.exact for p in parts))


def to_hyperscan(pattern: str) -> str:
    """``pattern`` (Rust ``regex`` syntax) as a Hyperscan expression matching a superset."""
    reader = _Reader(pattern)
    out: list[str] = []
    # per open group: the caseless flag to restore at its ``)``
    stack: list[bool] = []
    caseless = False
    quantifiable = False  # may a quantifier follow what was just written?
    while reader.peek():
        c = reader.take()
        if c == "\\":
            e = reader.take()
            if e in "bBAz<>":
                if e == "b" and reader.peek() == "{":
                    reader._skip_property()
                quantifiable = False
                continue
            if e in _WIDE:
                out.append(f"[{_WIDE[e]}]")
            elif e in "WDS":
                out.append(f"\\{e}")
            elif e in "pP":
                reader._skip_property()
                out.append(_ANY)
            elif e == "x":
                out.append(_literal(chr(reader.hex_escape()), caseless))
            elif e in _SIMPLE_ESCAPES:
                out.append(f"\\x{{{_SIMPLE_ESCAPES[e]:x}}}")
            elif e.isalnum():
                raise Untranslatable(f"unknown escape \\{e}")
            else:
                out.append(_code(e))
            quantifiable = True
        elif c in "^$":
            quantifiable = False
        elif c == "[":
            out.append(reader.bracket().text(caseless))
            quantifiable = True
        elif c == "(":
            stack.append(caseless)
            if reader.peek() == "?":
                reader.i += 1
                caseless, text, closes = _group_flags(reader, caseless)
                if closes:  # (?flags) on its own: applies to the rest of the group
                    stack.pop()
                    out.append(text)
                    quantifiable = False
                    continue
                out.append(text)
            else:
                out.append("(?:")
            quantifiable = False
        elif c == ")":
            if not stack:
                raise Untranslatable("unbalanced )")
            caseless = stack.pop()
            out.append(")")
            quantifiable = True
        elif c == "|":
            out.append("|")
            quantifiable = False
        elif c in "*+?":
            if quantifiable:
                out.append(c)
            _skip_lazy(reader)
            quantifiable = False
        elif c == "{":
            end = reader.p.find("}", reader.i)
            body = reader.p[reader.i : end] if end > 0 else ""
            if not body or not all(ch.isdigit() or ch == "," for ch in body):
                raise Untranslatable("a { that is not a repetition")
            reader.i = end + 1
            if quantifiable:
                out.append("{" + body + "}")
            _skip_lazy(reader)
            quantifiable = False
        elif c == ".":
            out.append(".")
            quantifiable = True
        else:
            out.append(_literal(c, caseless))
            quantifiable = True
    if stack:
        raise Untranslatable("unclosed group")
    # a quantifier after a dropped assertion quantified nothing: written as nothing above
    return "".join(out)


def _skip_lazy(reader: _Reader) -> None:
    if reader.peek() == "?":
        reader.i += 1


def _literal(c: str, caseless: bool) -> str:
    if caseless and c in "kKsS":
        return f"(?:{c}|{_KELVIN if c in 'kK' else _LONG_S})"
    return _code(c)


def _group_flags(reader: _Reader, caseless: bool) -> tuple[bool, str, bool]:
    """After ``(?``: (caseless from here on, the text to write, whether the group closed
    already, as ``(?i)`` does)."""
    if reader.peek() in ("P", "<") and not reader.starts("<=") and not reader.starts("<!"):
        close = reader.p.find(">", reader.i)
        if close < 0:
            raise Untranslatable("unclosed group name")
        reader.i = close + 1
        return caseless, "(?:", False
    flags = ""
    while reader.peek() and reader.peek() not in ":)":
        flags += reader.take()
    end = reader.take()
    on, _, off = flags.partition("-")
    if set(on + off) - set("imsxuUR"):
        raise Untranslatable(f"unknown flags (?{flags}")
    if "x" in on:
        raise Untranslatable("(?x) is not supported")
    if "i" in on:
        caseless = True
    if "i" in off:
        caseless = False
    keep_on = "".join(f for f in on if f in "is")
    keep_off = "".join(f for f in off if f in "is")
    spelled = keep_on + (f"-{keep_off}" if keep_off else "")
    if end == ")":
        return caseless, f"(?{spelled})" if spelled else "", True
    return caseless, f"(?{spelled}:", False
