"""A secret cut in two by the end of one tool output and the start of the next.

Each text is redacted alone, so a token whose first half ends one tool output and whose second
half starts the next is found only if a half looks like a secret by itself; when the first
half did, its output ends with the marker and the second half is left, a bare run of token
characters that no rule recognises. Here each pair of consecutive outputs of a session is
looked at across its boundary, on the texts as already redacted:

* the last and first ``WINDOW`` characters, joined, are redacted with the rule set (but the
  key-word context rule, see :func:`_without_context`): a
  match that crosses the join, and is a run of token characters on each side of it (a value
  that ends one text, then the start of the next, is not one), is a secret cut in two, and
  its part on each side is replaced;
* an output that ends with the marker is joined to the next with a line break, so the rule
  that follows a redacted token over a line break (``pass = "after"``) finds the rest.

Only what crosses (or, after a marker, starts) the join is replaced: what lies inside one text
was that text's own redaction's to find. Pure: texts in, texts out.

    redact_across(texts, groups, rules) -> (texts, crossings)
    redact_across_frame(items, rules) -> (items, hits)   # consecutive tool outputs
    redact_across_parts(items, rules, part) -> (items, hits)   # … of two parts only
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import polars as pl

from memkiln.transforms.redact import REDACTED, RuleSet, redact_series

__all__ = [
    "HIT_ID",
    "TOOL_OUTPUT_TYPES",
    "WINDOW",
    "concat_across_parts",
    "redact_across",
    "redact_across_frame",
    "redact_across_parts",
]

#: Characters on each side of a join that are redacted together: longer than any token.
WINDOW = 256
#: What each side of a cut token is: token characters, ``=`` only as padding at its end.
_RUN = re.compile(r"[A-Za-z0-9_+/.~-]+={0,2}")
#: The name the crossings are counted under in the hits per rule.
HIT_ID = "split-across-outputs"
TOOL_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "tool_result")


def _replaced_spans(before: str, after: str) -> list[tuple[int, int]] | None:
    """The spans of ``before`` that redaction replaced by the marker to give ``after``, in
    order; None when ``after`` is not ``before`` with spans so replaced."""
    spans: list[tuple[int, int]] = []
    i = o = 0
    while o < len(after):
        m = after.find(REDACTED, o)
        if m < 0:
            m = len(after)
        if before[i : i + m - o] != after[o:m]:
            return None
        i += m - o
        o = m
        if o == len(after):
            break
        # what the marker replaced ends where the text after it (to the next marker) starts
        o += len(REDACTED)
        nxt = after.find(REDACTED, o)
        segment = after[o : len(after) if nxt < 0 else nxt]
        if before.startswith(REDACTED, i):  # a marker already there
            i += len(REDACTED)
            continue
        if not segment:
            end = len(before) if nxt < 0 else _marker_end(before, i)
        else:
            end = before.find(segment, i + 1)
            if nxt < 0:  # the last segment ends the text: take its last place
                end = len(before) - len(segment) if before.endswith(segment) else -1
        if end <= i:
            return None
        spans.append((i, end))
        i = end
    return spans if i == len(before) else None


def _marker_end(before: str, i: int) -> int:
    """Two markers side by side: the first replaced up to where the text holds one already,
    else nothing can be said (-1)."""
    at = before.find(REDACTED, i + 1)
    return at if at > i else -1


def redact_across(
    texts: Sequence[str | None], groups: Sequence[object], rules: RuleSet
) -> tuple[list[str | None], int]:
    """``texts`` (redacted, in order) with what a secret cut by the join of two consecutive
    texts of the same group left on either side replaced; and how many joins held one."""
    out: list[str | None] = list(texts)
    pairs = [
        i for i in range(len(texts) - 1) if texts[i] and texts[i + 1] and groups[i] == groups[i + 1]
    ]
    if not pairs:
        return out, 0
    joints: list[str] = []
    layout: list[tuple[int, int, int]] = []  # pair index, tail length, separator length
    for i in pairs:
        left, right = texts[i], texts[i + 1]
        assert left is not None and right is not None
        tail, head = left[-WINDOW:], right[:WINDOW]
        joints.append(tail + head)
        layout.append((i, len(tail), 0))
        if left.endswith(REDACTED):
            joints.append(tail + "\n" + head)
            layout.append((i, len(tail), 1))
    redacted = redact_series(
        pl.Series("text", joints, dtype=pl.String), rules=_without_context(rules), unescape=False
    ).to_list()
    cuts: dict[int, list[tuple[int, int]]] = {}
    crossings: set[int] = set()
    for joint, after, (i, b, sep) in zip(joints, redacted, layout, strict=True):
        if after == joint:
            continue
        spans = _replaced_spans(joint, after or "")
        if spans is None:
            continue
        head_at = b + sep
        left_len, right_len = out_len(texts[i]), out_len(texts[i + 1])
        for start, end in spans:
            if end <= head_at:
                continue  # inside the first text
            if start >= b and not (sep and start == head_at):
                continue  # inside the second text (a marker before a line break: its rest)
            head = joint[head_at:end]
            if not _RUN.fullmatch(head) or (start < b and not _RUN.fullmatch(joint[start:b])):
                continue  # what a cut token leaves is a run of token characters each side
            if start < b:
                cuts.setdefault(i, []).append((left_len - b + start, left_len))
            cuts.setdefault(i + 1, []).append((0, min(end - head_at, right_len)))
            crossings.add(i)
    for index, ranges in cuts.items():
        text = out[index]
        assert text is not None
        for start, end in sorted(_merged(ranges), reverse=True):
            if text[start:end] != REDACTED and end > start:
                text = text[:start] + REDACTED + text[end:]
        out[index] = text
    return out, len(crossings)


def _without_context(rules: RuleSet) -> RuleSet:
    """The rules a join is redacted with: all but the key-word context rule, whose random-
    looking value after a key word is what two texts side by side often make
    (``test_refresh`` then a commit hash)."""
    return dataclasses.replace(rules, context=())


def out_len(text: str | None) -> int:
    return len(text or "")


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _joined(
    items: pl.DataFrame, chosen: pl.DataFrame, key: str, rules: RuleSet
) -> tuple[pl.DataFrame, dict[str, int]]:
    """``items`` with :func:`redact_across` applied to the texts of ``chosen`` (rows of
    ``items``, ``__row``, in order), joined within each value of ``key``."""
    if chosen.height < 2:
        return items, {}
    texts, n = redact_across(chosen["text"].to_list(), chosen[key].to_list(), rules)
    if not n:
        return items, {}
    changed = [
        (row, text)
        for row, text, old in zip(chosen["__row"].to_list(), texts, chosen["text"], strict=True)
        if text != old
    ]
    rows = pl.Series([row for row, _ in changed], dtype=pl.UInt32)
    column = items["text"].scatter(rows, pl.Series([t for _, t in changed], dtype=pl.String))
    return items.with_columns(column), {HIT_ID: n}


def redact_across_frame(
    items: pl.DataFrame,
    *,
    rules: RuleSet,
    group: str = "fid",
    order: Sequence[str] = ("fid", "line_no"),
    kinds: Sequence[str] = TOOL_OUTPUT_TYPES,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """``items`` (redacted) with :func:`redact_across` applied to the ``text`` of consecutive
    tool outputs (``item_type`` in ``kinds``) of each ``group``, in ``order``; the crossings
    counted under :data:`HIT_ID`."""
    needed = {group, "item_type", "text", *order}
    if items.is_empty() or not needed <= set(items.columns):
        return items, {}
    chosen = (
        items.with_row_index("__row")
        .filter(pl.col("item_type").is_in(list(kinds)) & pl.col("text").is_not_null())
        .sort([group, *order])
    )
    return _joined(items, chosen, group, rules)


def redact_across_parts(
    items: pl.DataFrame,
    *,
    rules: RuleSet,
    part: str,
    group: str = "fid",
    order: Sequence[str] = ("fid", "line_no"),
    kinds: Sequence[str] = TOOL_OUTPUT_TYPES,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """:func:`redact_across_frame` for the joins its parts' own calls could not see: of two
    consecutive tool outputs of a ``group`` (in ``order``), only those from two different
    ``part`` values (parts of a batch parsed apart, pieces of a large file) are joined.

    Each join is its own pair; an output between two such joins (alone in its part) is
    redacted for both."""
    needed = {group, part, "item_type", "text", *order}
    if items.is_empty() or not needed <= set(items.columns):
        return items, {}
    chosen = (
        items.with_row_index("__row")
        .filter(pl.col("item_type").is_in(list(kinds)) & pl.col("text").is_not_null())
        .sort([group, *order], maintain_order=True)
    )
    crossing = (
        (pl.col(group) == pl.col(group).shift(1)) & (pl.col(part) != pl.col(part).shift(1))
    ).fill_null(False)
    # a row not joined to the one before it by a crossing starts a new pair (group of rows)
    chosen = chosen.with_columns(__pair=(~crossing).cum_sum())
    chosen = chosen.filter(pl.len().over("__pair") > 1)
    return _joined(items, chosen, "__pair", rules)


def concat_across_parts(
    parts: Sequence[pl.DataFrame], *, rules: RuleSet
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The items of a batch's parts, parsed and redacted apart, as one frame, with a token cut
    by two tool outputs of one file that fell in two parts redacted
    (:func:`redact_across_parts`)."""
    if len(parts) < 2:
        return pl.concat(parts), {}
    tagged = pl.concat(
        [p.with_columns(__part=pl.lit(i, dtype=pl.Int32)) for i, p in enumerate(parts)]
    )
    joined, hits = redact_across_parts(tagged, rules=rules, part="__part")
    return joined.drop("__part"), hits
