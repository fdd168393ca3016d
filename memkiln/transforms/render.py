"""Kept items as compact JSON, one object per line: the ``rollout_contents`` a model reads,
and the stage-one messages built from them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import polars as pl

from memkiln.transforms.chunks import Chunk, part_note, plan_chunks
from memkiln.transforms.estimate import request_input_tokens
from memkiln.transforms.prompts import StageOneInput, build_stage_one_input, escape_block
from memkiln.transforms.redact import RuleSet, redact_expr
from memkiln.transforms.tokens import count_tokens, stage_one_keep_chars

#: An item's JSON beyond its text (its type, role, ids, quotes, the line end), estimated.
ITEM_OVERHEAD_CHARS = 64


def shown_role_expr() -> pl.Expr:
    """A message's role as a model is shown it: a "user" message the user did not type (a
    command's output, a compact summary, a reviewer's results, a sub-agent's prompt) is shown
    under its provenance (``tool``, ``harness``, ``agent``), never as the user's."""
    role = pl.col("role")
    provenance = pl.col("provenance")
    return (
        pl.when((role == "user") & provenance.is_not_null() & (provenance != "user"))
        .then(provenance)
        .otherwise(role)
    )


def item_json_expr() -> pl.Expr:
    """One compact JSON object per item, shaped like the item type (Codex's field names)."""
    t = pl.col("item_type")
    message = pl.struct(type=t, role=shown_role_expr(), content=pl.col("parts"))
    call = pl.struct(type=t, name=pl.col("name"), call_id=pl.col("call_id"), arguments="text")
    custom = pl.struct(type=t, name=pl.col("name"), call_id=pl.col("call_id"), input="text")
    output = pl.struct(type=t, call_id=pl.col("call_id"), output="text")
    action = pl.struct(type=t, call_id=pl.col("call_id"), action="text")
    return (
        pl.when(t == "message")
        .then(message.struct.json_encode())
        .when(t == "function_call")
        .then(call.struct.json_encode())
        .when(t == "custom_tool_call")
        .then(custom.struct.json_encode())
        .when(t.is_in(["function_call_output", "custom_tool_call_output", "tool_search_output"]))
        .then(output.struct.json_encode())
        .otherwise(action.struct.json_encode())
    )


def render_items(items: pl.LazyFrame, *, rules: RuleSet) -> pl.LazyFrame:
    """Add ``item_json`` to kept items, redacted again with the current rules (items stored
    under an older rule set get the newer rules too)."""
    if "provenance" not in items.collect_schema().names():  # items built before provenance
        items = items.with_columns(provenance=pl.lit(None, dtype=pl.String))
    return items.with_columns(item_json=redact_expr(item_json_expr(), rules=rules))


def contents_by_rollout(
    kept: pl.LazyFrame,
    *,
    rules: RuleSet,
    keep_chars: int | None = None,
    gaps: pl.DataFrame | None = None,
) -> pl.LazyFrame:
    """``rollout_id, contents, omitted_chars``: each session's rendered items as JSON lines,
    in order.

    With ``keep_chars``, a session far longer than the model can read (over four times
    ``keep_chars`` of item text) keeps only the items within ``keep_chars`` of its start and of
    its end, before any of them is rendered: the middle would be cut by the token budget
    anyway, and rendering it whole held the session several times in memory (a 200 MB session
    peaked over 2 GB). ``omitted_chars`` is the size of the items left out (their text, an
    estimate of their JSON), so the truncation marker still counts them.

    ``gaps`` (``rollout_id, gap_seq, gap_chars``): sessions whose items between their first
    and last ones were not read (``memkiln.io.session_items``), of that size, before
    ``gap_seq``; they are counted as if read.
    """
    if keep_chars is not None:
        size = pl.col("text").str.len_chars().fill_null(0) + ITEM_OVERHEAD_CHARS
        before = size.cum_sum().over("rollout_id", order_by="seq") - size
        after = size.cum_sum(reverse=True).over("rollout_id", order_by="seq") - size
        total = size.sum().over("rollout_id")
        if gaps is not None and gaps.height:  # the middle not read, counted where it was
            gap = pl.col("_gap_chars").fill_null(0)
            past = (pl.col("seq") >= pl.col("_gap_seq")).fill_null(False)
            before = before + pl.when(past).then(gap).otherwise(0)
            after = after + pl.when(past).then(0).otherwise(gap)
            total = total + gap
            kept = kept.join(
                gaps.lazy().select("rollout_id", _gap_seq="gap_seq", _gap_chars="gap_chars"),
                on="rollout_id",
                how="left",
            )
        keep = (total <= 4 * keep_chars) | (before < keep_chars) | (after < keep_chars)
        kept = kept.with_columns(_size=size, _keep=keep)
        omitted = (
            kept.filter(~pl.col("_keep"))
            .group_by("rollout_id")
            .agg(omitted_chars=pl.col("_size").sum())
        )
        if gaps is not None and gaps.height:
            omitted = omitted.join(gaps.lazy(), on="rollout_id", how="full", coalesce=True).select(
                "rollout_id",
                omitted_chars=pl.col("omitted_chars").fill_null(0).cast(pl.Int64)
                + pl.col("gap_chars").fill_null(0),
            )
            kept = kept.drop("_gap_seq", "_gap_chars")
        kept = kept.filter(pl.col("_keep")).drop("_size", "_keep")
    contents = (
        render_items(kept, rules=rules)
        .group_by("rollout_id")
        .agg(contents=pl.col("item_json").sort_by("seq").str.join("\n"))
    )
    if keep_chars is None:
        return contents.with_columns(omitted_chars=pl.lit(0, dtype=pl.Int64))
    return contents.join(omitted, on="rollout_id", how="left").with_columns(
        pl.col("omitted_chars").fill_null(0).cast(pl.Int64)
    )


def stage_one_inputs(
    sessions: pl.DataFrame,
    kept: pl.LazyFrame,
    *,
    context_window: int | None,
    max_output_tokens: int,
    rules: RuleSet,
) -> Iterator[tuple[dict[str, Any], StageOneInput]]:
    """The stage-one messages of ``sessions`` (``rollout_id, path, cwd`` and any other
    columns, passed through) from their kept items: the one builder behind extraction and
    ``render-input``, so what a user is shown is what a model is sent.

    Yields each session's row, its path and cwd redacted with the current rules, and its
    messages; a session without kept items gets empty contents.
    """
    keep_chars = stage_one_keep_chars(context_window)
    gaps = None
    if "gap_chars" in sessions.columns:  # sessions read in pieces (``io.session_items``)
        gaps = sessions.select("rollout_id", "gap_seq", "gap_chars").filter(pl.col("gap_chars") > 0)
        sessions = sessions.drop("gap_seq", "gap_chars")
    contents = contents_by_rollout(kept, rules=rules, keep_chars=keep_chars, gaps=gaps).collect()
    table = sessions.with_columns(
        path=redact_expr(pl.col("path"), rules=rules), cwd=redact_expr(pl.col("cwd"), rules=rules)
    ).join(contents, on="rollout_id", how="left")
    # a time Python cannot hold (year 0, a session of another tool) is passed on as null
    table = table.with_columns(
        pl.when(pl.col(name).dt.year().is_between(1, 9999)).then(pl.col(name)).alias(name)
        for name, dtype in table.schema.items()
        if isinstance(dtype, pl.Datetime | pl.Date)
    )
    for row in table.iter_rows(named=True):
        body, omitted = row.pop("contents"), row.pop("omitted_chars")
        yield (
            row,
            build_stage_one_input(
                rollout_path=row["path"],
                rollout_cwd=row["cwd"],
                rollout_contents=body or "",
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                omitted_chars=omitted or 0,
            ),
        )


#: Tokens of the chunk budget left for the line that names a chunk's part (``part_note``).
PART_NOTE_TOKENS = 64


@dataclass(frozen=True, eq=False)
class ChunkParts:
    """The stage-one messages of a session too long for one (``stage_one_chunks``), one per
    chunk, each built by the stage-one builder when it is asked for (``build``, as it is
    sent), from the session's rendered items held once in Arrow (``texts``, UTF-8).

    Built all at once, the messages of a 30 MiB session took about four times its size (a
    Python string of four bytes a character when one character needs them), several
    sessions in flight together: now a session holds its texts and its chunks' bounds. The
    same message is built every time (the builder is pure); ``input_tokens`` (each message's,
    ``request_input_tokens``) and ``cut`` (the messages the builder cut) are known once every
    message was built (``measured``). Empty: a session sent in one message."""

    texts: pl.Series = field(default_factory=lambda: pl.Series("item_json", [], pl.String))
    chunks: tuple[Chunk, ...] = ()
    rollout_path: str = ""
    rollout_cwd: str | None = None
    context_window: int | None = None
    max_output_tokens: int = 0
    input_tokens: tuple[int, ...] = ()
    cut: int = 0

    def __len__(self) -> int:
        return len(self.chunks)

    def __iter__(self) -> Iterator[StageOneInput]:
        return (self.build(n) for n in range(len(self.chunks)))

    def build(self, n: int) -> StageOneInput:
        """The message of chunk ``n`` (from 0)."""
        chunk = self.chunks[n]
        contents = self.texts.slice(chunk.start, chunk.stop - chunk.start).str.join("\n")
        return build_stage_one_input(
            rollout_path=self.rollout_path,
            rollout_cwd=self.rollout_cwd,
            rollout_contents=contents.item() or "",
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            part=part_note(n + 1, len(self.chunks)),
            contents_tokens=chunk.tokens,
        )

    def measured(self, digest: Digest) -> ChunkParts:
        """These parts with ``input_tokens`` and ``cut`` known, each message built once on the
        way and fed to ``digest`` (its system message, a NUL, its user message, a NUL)."""
        tokens: list[int] = []
        cut = 0
        for prompt in self:
            digest.update(prompt.system.encode() + b"\0" + prompt.user.encode() + b"\0")
            tokens.append(request_input_tokens(prompt))
            cut += prompt.truncation.truncated
        return replace(self, input_tokens=tuple(tokens), cut=cut)


class Digest(Protocol):
    """What ``ChunkParts.measured`` uses of a ``hashlib`` object."""

    def update(self, data: bytes, /) -> None: ...


#: No chunks: a session sent in one message.
NO_PARTS = ChunkParts()

#: Rendered items counted a slice at a time (their Python strings are held only meanwhile:
#: 4,096 rows held a whole 30 MiB session as Python strings, 110 MB).
COUNT_SLICE_ROWS = 256


#: Characters of item text rendered and redacted at once for a session's chunks: redacting a
#: 60 MiB session's items whole took about three times their size on top of them (+190 MB),
#: in slices of this size +80 MB (redaction is row by row, so the texts are the same).
RENDER_SLICE_CHARS = 4 * 1024 * 1024


def rendered_in_slices(items: pl.DataFrame, *, rules: RuleSet) -> pl.DataFrame:
    """``seq, item_json`` of a session's kept items in order (``render_items``), rendered a
    slice of about ``RENDER_SLICE_CHARS`` of item text at a time."""
    if not items["seq"].is_sorted():
        items = items.sort("seq")
    size = items["text"].str.len_chars().fill_null(0) + ITEM_OVERHEAD_CHARS
    slice_of = (size.cum_sum() - size) // RENDER_SLICE_CHARS
    parts: list[pl.DataFrame] = []
    start = 0
    for n in slice_of.value_counts(sort=False).sort(slice_of.name)["count"]:
        part = items.slice(start, n).lazy()
        parts.append(render_items(part, rules=rules).select("seq", "item_json").collect())
        start += n
    if not parts:
        return render_items(items.lazy(), rules=rules).select("seq", "item_json").collect()
    return pl.concat(parts)


def stage_one_chunks(
    items: pl.DataFrame,
    *,
    rollout_path: str,
    rollout_cwd: str | None,
    starts: list[int],
    budget: int,
    context_window: int | None,
    max_output_tokens: int,
    rules: RuleSet,
    segments: list[int] | None = None,
) -> ChunkParts:
    """The stage-one messages of a session too long for one (``items``: its kept items;
    ``budget``: the contents budget its single message had), one per chunk of whole turns
    (``plan_chunks``; a chunk begins only at one of ``starts``, ``seq`` values; with
    ``segments``, whole segments first), each rendered by the stage-one builder, so each is
    counted and budgeted as a single message is (``ChunkParts``: built when asked for)."""
    rendered = rendered_in_slices(items, rules=rules)
    texts = rendered["item_json"].fill_null("").rechunk()
    tokens = [
        count_tokens(escape_block(text))
        for start in range(0, len(texts), COUNT_SLICE_ROWS)
        for text in texts.slice(start, COUNT_SLICE_ROWS).to_list()
    ]
    chunks = plan_chunks(
        rendered["seq"].to_list(),
        tokens,
        starts=starts,
        budget=budget - PART_NOTE_TOKENS,
        segments=segments,
    )
    return ChunkParts(
        texts=texts,
        chunks=tuple(chunks),
        rollout_path=rollout_path,
        rollout_cwd=rollout_cwd,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
    )
