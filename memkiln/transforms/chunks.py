"""A session too long for one request, in chunks: which items each chunk holds, and how the
chunks' partial memories are grouped into merge requests. Pure functions, no I/O.

A chunk starts only at an allowed start (``turn_starts``: a user message), so that a turn is
read whole by one request. A turn that alone is over the budget is split between its items
(``Chunk.mid_turn``); an item that alone is over the budget is a chunk of its own, which the
stage-one builder cuts in the middle as it cuts any over-long input (``Chunk.over_budget``):
the only case where part of a session is left out, and it is reported.

Costs are the upper bounds of ``memkiln.transforms.tokens.count_tokens``: a chunk's contents
are its items joined by line ends, each join charged one token (a join can only lose merges
across it, never add them), so a chunk planned within the budget is never cut.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import polars as pl

from memkiln.transforms.stage_one_answer import StageOneOutput


@dataclass(frozen=True)
class Chunk:
    """Items ``start`` to ``stop`` (positions, ``stop`` excluded) of a session, in order."""

    start: int
    stop: int
    tokens: int  # an upper bound of the contents' tokens, joins included
    mid_turn: bool = False  # starts inside a turn that alone was over the budget
    over_budget: bool = False  # one item over the budget: the builder cuts it in the middle


def turn_starts(items: pl.DataFrame) -> list[int]:
    """The ``seq`` of every item a chunk may start at: each user message (a turn starts
    there), and the session's first item."""
    if items.is_empty():
        return []
    first = items["seq"].min()
    user = items.filter(
        ((pl.col("item_type") == "message") & (pl.col("role") == "user")) | (pl.col("seq") == first)
    )
    return sorted(user["seq"].to_list())


def segment_aligned(
    seqs: Sequence[int],
    tokens: Sequence[int],
    *,
    segments: Collection[int],
    turns: Collection[int],
    budget: int,
) -> set[int]:
    """Where chunks may start so that they follow the session's segments: the first item of
    each segment, and, inside a segment over the budget alone, each of its turns."""
    first = {seqs[0]} if seqs else set()
    heads = set(segments)
    bounds = [i for i, seq in enumerate(seqs) if i == 0 or seq in heads] + [len(seqs)]
    allowed = set(first)
    for start, stop in itertools.pairwise(bounds):
        allowed.add(seqs[start])
        if sum(t + 1 for t in tokens[start:stop]) - 1 > budget:
            allowed.update(seq for seq in seqs[start + 1 : stop] if seq in turns)
    return allowed


def plan_chunks(
    seqs: Sequence[int],
    tokens: Sequence[int],
    *,
    starts: Collection[int],
    budget: int,
    segments: Collection[int] | None = None,
) -> list[Chunk]:
    """Consecutive chunks covering every item (``seqs`` in order, ``tokens`` each), as few
    as the budget allows: whole turns (from one of ``starts`` to the next) are packed into a
    chunk while its tokens stay within ``budget``; a turn over the budget alone is split
    between items; an item over the budget alone is a chunk of its own. With ``segments``
    (their first ``seq`` each), whole segments are packed instead, and only a segment over
    the budget alone is split at its turns (``segment_aligned``)."""
    if len(seqs) != len(tokens):
        raise ValueError("one token count per item")
    allowed = set(starts)
    if segments is not None:
        allowed = segment_aligned(seqs, tokens, segments=segments, turns=allowed, budget=budget)
    turns: list[tuple[int, int]] = []
    for i, seq in enumerate(seqs):
        if i == 0 or seq in allowed:
            turns.append((i, i + 1))
        else:
            turns[-1] = (turns[-1][0], i + 1)
    # each item costs its tokens and the join after it; the last join is not sent
    cost = [t + 1 for t in tokens]
    chunks: list[Chunk] = []
    open_start, open_cost = 0, 0  # the chunk being filled: from open_start, open_cost so far
    open_mid = False

    def close(stop: int) -> None:
        nonlocal open_cost
        if stop > open_start:
            chunks.append(Chunk(open_start, stop, open_cost - 1, mid_turn=open_mid))
        open_cost = 0

    for start, stop in turns:
        turn_cost = sum(cost[start:stop])
        if turn_cost - 1 <= budget:
            if open_cost and open_cost + turn_cost - 1 > budget:
                close(start)
            if not open_cost:
                open_start, open_mid = start, False
            open_cost += turn_cost
            continue
        close(start)  # a turn over the budget: split between its items
        open_start, open_mid = start, False
        for i in range(start, stop):
            if cost[i] - 1 > budget:
                close(i)
                chunks.append(Chunk(i, i + 1, tokens[i], mid_turn=i > start, over_budget=True))
                open_start, open_mid = i + 1, True
                continue
            if open_cost and open_cost + cost[i] - 1 > budget:
                close(i)
                open_start, open_mid = i, True
            open_cost += cost[i]
    close(len(seqs))
    return chunks


def merge_groups(tokens: Sequence[int], *, budget: int) -> list[range]:
    """Consecutive groups of partial memories (``tokens`` each) to merge in one request
    each, within ``budget`` where possible; every group but a lone last one holds at least
    two, so that each round of merges has fewer memories than the one before."""
    groups: list[range] = []
    start, used = 0, 0
    for i, n in enumerate(tokens):
        if i > start and used + n + 1 > budget and i - start >= 2:
            groups.append(range(start, i))
            start, used = i, 0
        used += n + 1
    if start < len(tokens):
        groups.append(range(start, len(tokens)))
    return groups


def part_note(chunk: int, chunks: int) -> str:
    """What a chunk's message says of its place in the session."""
    return (
        f"This session is too long for one request: below is part {chunk} of {chunks}, "
        "a run of whole turns in order. Write the memory of what this part shows; the "
        "memories of all the parts are merged afterwards."
    )


def partial_block(first: int, last: int, total: int, output: StageOneOutput) -> str:
    """One partial memory as the merge request shows it: which parts it covers, then its
    three fields."""
    parts = f"Part {first}" if first == last else f"Parts {first} to {last}"
    return (
        f"### {parts} of {total}\n\n"
        f"rollout_slug: {output.rollout_slug or 'null'}\n\n"
        f"raw_memory:\n{output.raw_memory.strip()}\n\n"
        f"rollout_summary:\n{output.rollout_summary.strip()}\n"
    )
