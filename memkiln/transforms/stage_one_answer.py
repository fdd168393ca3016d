"""The stage-one answer: a strict pydantic model, the JSON schema sent to the model (generated
from that same model), and parsing that ends in a fixed reason when the answer is unusable."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


def map_strings(value: M, fn: Callable[[str], str]) -> M:
    """A copy of a parsed answer with ``fn`` applied to every string in it, however deep
    (texts, names, list items): how every model string is redacted before anything uses it."""

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return fn(node)
        if isinstance(node, BaseModel):
            return node.model_copy(update={k: walk(v) for k, v in node.__dict__.items()})
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(value)  # type: ignore[no-any-return]  # walk keeps the input's type


class StageOneOutput(BaseModel):
    """What stage one produces per session. Empty texts mean "nothing durable" (no-op)."""

    model_config = ConfigDict(extra="forbid")

    raw_memory: str
    rollout_summary: str
    rollout_slug: str | None

    @property
    def is_noop(self) -> bool:
        return not self.raw_memory.strip() or not self.rollout_summary.strip()


NOOP = StageOneOutput(raw_memory="", rollout_summary="", rollout_slug=None)


@cache
def stage_one_json_schema() -> dict[str, Any]:
    """The strict JSON schema of :class:`StageOneOutput` (every key required, no others)."""
    return strict_schema(StageOneOutput)


#: An answer longer than this many characters per output token allowed did not come from a
#: model that kept to the limit (a real token is a few characters): it fails as too long.
ANSWER_CHARS_PER_TOKEN = 16


@dataclass(frozen=True)
class Parsed:
    """A parsed answer, or why it could not be used."""

    output: StageOneOutput | None
    # invalid_json | schema_mismatch | refused | truncated | answer_too_long
    reason: str | None = None
    detail: str | None = None


def judge_stage_one(
    text: str | None, *, refusal: str | None, cut: bool, max_output_tokens: int
) -> Parsed:
    """The outcome of an answer, each fault with its own reason: the model declined
    (``refused``, its words as the detail), the output limit cut the answer (``truncated``),
    the answer is far longer than the limit allows (``answer_too_long``), else parsing
    (``parse_stage_one``)."""
    if refusal:
        return Parsed(None, "refused", " ".join(refusal.split())[:300])
    if cut:
        limit_note = f"the answer reached the {max_output_tokens:,}-token output limit"
        return Parsed(None, "truncated", limit_note)
    limit = max_output_tokens * ANSWER_CHARS_PER_TOKEN
    if text is not None and len(text) > limit:
        return Parsed(
            None,
            "answer_too_long",
            f"{len(text):,} characters, more than {max_output_tokens:,} output tokens can hold",
        )
    return parse_stage_one(text)


def parse_stage_one(text: str | None) -> Parsed:
    """Parse the model's answer text into :class:`StageOneOutput`."""
    if text is None or not text.strip():
        return Parsed(None, "invalid_json", "empty answer")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Parsed(None, "invalid_json", f"{exc.msg} at char {exc.pos}")
    if not isinstance(data, dict):
        return Parsed(None, "schema_mismatch", f"expected an object, got {type(data).__name__}")
    try:
        return Parsed(StageOneOutput.model_validate(data))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['type']}" for e in exc.errors()
        )
        return Parsed(None, "schema_mismatch", problems[:300])


class Skill(BaseModel):
    """A procedure seen to work more than once, written as ``skills/<name>/SKILL.md``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    body: str


class ConsolidationOutput(BaseModel):
    """What phase 2 asks a model for, per project."""

    model_config = ConfigDict(extra="forbid")

    memory_md: str
    memory_summary_md: str
    skills: list[Skill]


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A strict JSON schema for ``model``: every property required, no others, no titles."""

    def tighten(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("title", "default"):  # keywords, not properties that share the name
                if not isinstance(node.get(key), dict):
                    node.pop(key, None)
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                tighten(value)
        elif isinstance(node, list):
            for value in node:
                tighten(value)

    schema = model.model_json_schema()
    tighten(schema)
    return schema


def parse_model(text: str | None, model: type[M]) -> tuple[M | None, str | None, str | None]:
    """Parse ``text`` into ``model``: ``(value, reason, detail)`` with the same fixed reasons
    as stage one (``invalid_json``, ``schema_mismatch``)."""
    if text is None or not text.strip():
        return None, "invalid_json", "empty answer"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, "invalid_json", f"{exc.msg} at char {exc.pos}"
    try:
        return model.model_validate(data), None, None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['type']}" for e in exc.errors()
        )
        return None, "schema_mismatch", problems[:300]
