"""Untrusted text made safe to show: in a prompt, in a memory file, in a one-line field.

Session logs and model answers can hold anything: NUL bytes, terminal escapes, right-to-left
overrides that make a line read differently from what it holds, invisible tag characters,
line separators that are not ``\\n``, and names thousands of characters long. Three forms:

- ``clean_text``: multi-line text for a memory file; unsafe characters removed.
- ``one_line``: a value shown on one line of a memory file (a heading, a table cell);
  cleaned, whitespace collapsed, capped.
- ``escaped_line``: a value placed in a prompt's header; every unsafe character and line
  break is *visible* as a JSON-style escape, ``<`` is escaped so no tag can be formed, and
  the value is capped. It can never end a line or a block of the prompt.
"""

from __future__ import annotations

import json
import re

#: Characters no memory file or prompt header may hold: C0 controls but tab and newline,
#: DEL and C1 controls, bidirectional marks, embeddings, overrides and isolates, the BOM and
#: other invisible format characters, lone surrogates, noncharacters and tag characters.
UNSAFE = (
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\ufffe\uffff"
    "\ud800-\udfff"
    "\U000e0000-\U000e007f"
)
_UNSAFE = re.compile(f"[{UNSAFE}]")
_LINE_BREAKS = re.compile("\r\n|[\r\u2028\u2029\x85]")
_SPACES = re.compile(r"\s+")
_HEADER_UNSAFE = re.compile(f"[{UNSAFE}\t\n\r\u2028\u2029<]")


def clean_text(text: str) -> str:
    """``text`` with every line break made ``\\n`` and every unsafe character removed."""
    return _UNSAFE.sub("", _LINE_BREAKS.sub("\n", text))


def cap(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with how much was left out."""
    if len(text) <= limit:
        return text
    note = f"… ({len(text) - limit:,} more characters)"
    return text[: max(limit - len(note), 0)] + note


def one_line(text: str | None, limit: int = 200) -> str:
    """``text`` cleaned, on one line (every run of whitespace one space), at most ``limit``
    characters."""
    if not text:
        return ""
    return cap(_SPACES.sub(" ", clean_text(text)).strip(), limit)


def escaped_line(text: str | None, limit: int = 300) -> str:
    """``text`` for a prompt header: backslashes, line breaks, tabs, unsafe characters and
    ``<`` written as JSON-style escapes (``\\n``, ``\\u202e``, ``\\u003c``), then capped; the
    result is one line and holds no tag."""
    if text is None:
        return ""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1]  # \\, ", \n, \t and C0 controls
    escaped = _HEADER_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", escaped)
    return cap(escaped, limit)
