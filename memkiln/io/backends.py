"""Stage-one model backends behind one small interface.

- ``heuristic``: offline, deterministic, rule-based (``memkiln.transforms.heuristic``).
- ``openai``: any OpenAI-compatible endpoint through the official client: Chat Completions
  (or the Responses API) with a strict JSON schema generated from ``StageOneOutput``.
  The client retries, with backoff and honouring ``Retry-After``, only what can succeed
  later: 429, 5xx, timeouts and connection errors. A 400 fails at once.

Every answer is parsed into the strict model and redacted again before it is returned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Protocol

import openai
import polars as pl

from memkiln.errors import ConfigError
from memkiln.io.jobs import Outcome
from memkiln.io.store import now
from memkiln.settings import Settings
from memkiln.transforms.heuristic import RolloutFacts, extract_heuristic
from memkiln.transforms.outputs import (
    ConsolidationOutput,
    StageOneOutput,
    parse_model,
    parse_stage_one,
    stage_one_json_schema,
    strict_schema,
)
from memkiln.transforms.prompts import ConsolidationInput, StageOneInput
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.tokens import count_tokens

HEURISTIC_MODEL = "heuristic-v1"


@dataclass(frozen=True)
class ConsolidationResult:
    """A model's phase-2 answer, or why there is none."""

    output: ConsolidationOutput | None
    reason: str | None = None
    detail: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class Request:
    """One session's stage-one request: its kept items and the rendered messages."""

    rollout_id: str
    items: pl.DataFrame
    facts: RolloutFacts
    prompt: StageOneInput
    input_hash: str


class Backend(Protocol):
    name: str
    model: str

    async def extract(self, request: Request) -> Outcome: ...

    async def aclose(self) -> None: ...


def finalize(rollout_id: str, output: StageOneOutput, **usage: Any) -> Outcome:
    """Turn a parsed answer into an outcome (no-op when a text is empty). The texts are
    redacted again, vectorized, when the outcome is written (``finish_many``)."""
    if output.is_noop:
        return Outcome(rollout_id, "succeeded_no_output", **usage)
    return Outcome(rollout_id, "succeeded", output=output, **usage)


class HeuristicBackend:
    """Rule-based extraction; no network, same formats as a model's answer."""

    name = "heuristic"
    model = HEURISTIC_MODEL

    def __init__(self, *, rules: RuleSet) -> None:
        self.rules = rules

    async def extract(self, request: Request) -> Outcome:
        started = now()
        output = extract_heuristic(request.items, request.facts)
        return finalize(
            request.rollout_id,
            output,
            input_hash=request.input_hash,
            input_tokens=0,
            output_tokens=0,
            started_at=started,
        )

    async def aclose(self) -> None:
        return None


def failure_reason(exc: BaseException) -> str:
    """The fixed reason string for an exception raised by the openai client."""
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection_error"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth_error"
    if isinstance(exc, openai.NotFoundError):
        return "not_found"
    if isinstance(exc, openai.BadRequestError):
        text = str(exc).lower()
        if "context" in text and ("length" in text or "window" in text or "too long" in text):
            return "context_overflow"
        return "bad_request"
    if isinstance(exc, openai.InternalServerError):
        return "server_error"
    if isinstance(exc, openai.APIStatusError):
        return "server_error" if exc.status_code >= 500 else "bad_request"
    return "client_error"


class OpenAIBackend:
    """Any OpenAI-compatible endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp server)."""

    name = "openai"

    def __init__(self, settings: Settings, *, rules: RuleSet) -> None:
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            if settings.base_url is None:
                raise ConfigError(
                    "the openai backend needs OPENAI_API_KEY (or --base-url for a local server)"
                )
            key = "unused"  # local servers usually need no key
        self.model = settings.model
        self.api = settings.api
        self.rules = rules
        self.context_window = settings.context_window
        self.max_output_tokens = settings.max_output_tokens
        self.price_in, self.price_out = settings.prices.get(settings.model, (0.0, 0.0))
        self._response_format = {
            "type": "json_schema",
            "json_schema": {
                "name": "stage_one_output",
                "schema": stage_one_json_schema(),
                "strict": True,
            },
        }
        self.client = openai.AsyncOpenAI(
            api_key=key,
            base_url=settings.base_url,
            timeout=settings.request_timeout_s,
            max_retries=settings.max_retries,
        )

    def _cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in + tokens_out * self.price_out) / 1_000_000

    async def extract(self, request: Request) -> Outcome:
        started = now()
        base = Outcome(
            request.rollout_id, "failed", input_hash=request.input_hash, started_at=started
        )
        prompt = request.prompt
        needed = prompt.system_tokens + prompt.user_tokens + self.max_output_tokens
        if self.context_window and needed > self.context_window:
            return replace(
                base,
                reason="context_overflow",
                detail=f"{needed} tokens needed, window {self.context_window}",
            )
        try:
            text, tokens_in, tokens_out = await self._call(prompt)
        except openai.APIError as exc:
            detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=self.rules)
            return replace(base, reason=failure_reason(exc), detail=detail)
        usage = {
            "input_hash": request.input_hash,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cost_usd": self._cost(tokens_in, tokens_out),
            "started_at": started,
        }
        parsed = parse_stage_one(text)
        if parsed.output is None:
            return Outcome(
                request.rollout_id,
                "failed",
                reason=parsed.reason,
                detail=redact_text(parsed.detail or "", rules=self.rules),
                **usage,
            )
        return finalize(request.rollout_id, parsed.output, **usage)

    async def _call(self, prompt: StageOneInput) -> tuple[str | None, int, int]:
        schema = stage_one_json_schema()
        if self.api == "responses":
            response = await self.client.responses.create(
                model=self.model,
                instructions=prompt.system,
                input=prompt.user,
                max_output_tokens=self.max_output_tokens,
                text={
                    "format": {
                        "type": "json_schema",
                        "name": "stage_one_output",
                        "schema": schema,
                        "strict": True,
                    }
                },
            )
            usage = response.usage
            return (
                response.output_text,
                usage.input_tokens if usage else count_tokens(prompt.user),
                usage.output_tokens if usage else 0,
            )
        completion = await self.client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            max_completion_tokens=self.max_output_tokens,
            # sent as is: the client's typed-parameter transform walks a schema dict
            # recursively on every request, which costs more than the request itself
            extra_body={"response_format": self._response_format},
        )
        choice = completion.choices[0] if completion.choices else None
        text = choice.message.content if choice else None
        usage = completion.usage
        return (
            text,
            usage.prompt_tokens if usage else count_tokens(prompt.user),
            usage.completion_tokens if usage else 0,
        )

    async def consolidate(self, prompt: ConsolidationInput) -> ConsolidationResult:
        """One structured call for a project's MEMORY.md, memory_summary.md and skills."""
        needed = count_tokens(prompt.system) + count_tokens(prompt.user) + 16_000
        if self.context_window and needed > self.context_window:
            return ConsolidationResult(None, "context_overflow", f"{needed} tokens needed")
        schema = strict_schema(ConsolidationOutput)
        try:
            completion = await self.client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user},
                ],
                max_completion_tokens=16_000,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "consolidation", "schema": schema, "strict": True},
                },
            )
        except openai.APIError as exc:
            detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=self.rules)
            return ConsolidationResult(None, failure_reason(exc), detail)
        text = completion.choices[0].message.content if completion.choices else None
        value, reason, detail = parse_model(text, ConsolidationOutput)
        usage = completion.usage
        return ConsolidationResult(
            value,  # type: ignore[arg-type]
            reason,
            detail,
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )

    async def aclose(self) -> None:
        await self.client.close()


def make_backend(settings: Settings, *, rules: RuleSet) -> Backend:
    if settings.backend == "heuristic":
        return HeuristicBackend(rules=rules)
    if settings.backend == "openai":
        return OpenAIBackend(settings, rules=rules)
    raise ConfigError(f"unknown backend {settings.backend!r}; use heuristic or openai")
