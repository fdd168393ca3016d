"""Stage-one model backends behind one small interface.

- ``heuristic``: offline, deterministic, rule-based (``memkiln.transforms.heuristic``).
- ``openai``: any OpenAI-compatible endpoint through the official client: Chat Completions
  (or the Responses API) with a strict JSON schema generated from ``StageOneOutput``.
  The client retries, with backoff and honouring ``Retry-After``, only what can succeed
  later: 5xx, timeouts, connection errors, and 429 for every request but a session's single
  stage-one request, whose 429 comes back at once with the limits the answer stated
  (``Outcome.limits``): the run's controller pauses every request and sends it again
  (``memkiln.llm.ratelimit``). A 400 fails at once.

Every answer is parsed into the strict model and redacted again before it is returned.
"""

from __future__ import annotations

import asyncio
import email.utils
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, Protocol, TypeVar

import httpx2
import openai
import polars as pl
from openai import RequestOptions
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError

from memkiln.constants import HEURISTIC_MODEL
from memkiln.io.prices import PriceBook
from memkiln.io.store import now
from memkiln.llm.errors import body_problem, failed_call
from memkiln.llm.ratelimit import HOLD, Seen, hold, seen_in, wait_until
from memkiln.settings import Settings, openai_api_key
from memkiln.transforms.chunks import Chunk, merge_groups, partial_block
from memkiln.transforms.estimate import CONSOLIDATION_MIN_OUTPUT, consolidation_output_tokens
from memkiln.transforms.heuristic import RolloutFacts, extract_heuristic
from memkiln.transforms.prompts import (
    ConsolidationInput,
    StageOneInput,
    build_stage_one_merge_input,
    window_shortfall,
)
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.render import NO_PARTS, ChunkParts
from memkiln.transforms.stage_one_answer import (
    ConsolidationOutput,
    Parsed,
    StageOneOutput,
    judge_stage_one,
    map_strings,
    parse_model,
    stage_one_json_schema,
    strict_schema,
)
from memkiln.transforms.states import FailureReason, Outcome, OutcomeKind
from memkiln.transforms.text import clean_text
from memkiln.transforms.tokens import count_tokens

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
#: Request options of a model call: the API key as a bearer token, as ``create`` sends it.
BEARER_AUTH: RequestOptions = {"security": {"bearer_auth": True}}


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
    #: a session over the budget: one message per chunk, built as it is sent (``prompt``,
    #: the message cut in the middle, is then sent by no model backend)
    parts: ChunkParts = NO_PARTS
    #: the session's path and cwd as its messages show them (for the merge request)
    header: tuple[str, str | None] = ("", None)

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        """The chunks of a session sent in chunks (none for one sent whole)."""
        return self.parts.chunks


class Backend(Protocol):
    name: str
    model: str

    async def extract(self, request: Request) -> Outcome: ...

    async def aclose(self) -> None: ...


def safe_strings(value: M, *, rules: RuleSet) -> M:
    """Every string of a parsed answer with unsafe characters removed and secrets redacted,
    before anything (a file name, a log line, the store) uses it."""
    return map_strings(value, lambda text: redact_text(clean_text(text), rules=rules))


def finalize(
    rollout_id: str, output: StageOneOutput, *, rules: RuleSet | None, **usage: Any
) -> Outcome:
    """Turn a parsed answer into an outcome (no-op when a text is empty), its strings made
    safe first: a model's with ``safe_strings``; the heuristic's (built from redacted items)
    cleaned of unsafe characters when ``rules`` is None. Every text is redacted once more,
    vectorized, when the outcome is written (``finish_many``)."""
    output = map_strings(output, clean_text) if rules is None else safe_strings(output, rules=rules)
    if output.is_noop:
        return Outcome(rollout_id, OutcomeKind.SUCCEEDED_NO_OUTPUT, **usage)
    return Outcome(rollout_id, OutcomeKind.SUCCEEDED, output=output, **usage)


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
            rules=None,  # built from redacted items; redacted again when written
            input_hash=request.input_hash,
            input_tokens=0,
            output_tokens=0,
            started_at=started,
        )

    async def aclose(self) -> None:
        return None


class _ChatMessage(BaseModel):
    content: str | None = None
    refusal: str | None = None


class _ChatChoice(BaseModel):
    message: _ChatMessage
    finish_reason: str | None = None


class _ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class ChatAnswer(BaseModel):
    """What stage one reads of a Chat Completions response (every other field is ignored)."""

    choices: list[_ChatChoice] = []
    usage: _ChatUsage | None = None


class _OutputPart(BaseModel):
    type: str
    text: str | None = None
    refusal: str | None = None


class _OutputItem(BaseModel):
    type: str
    content: list[_OutputPart] | None = None


class _ResponsesUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class _Incomplete(BaseModel):
    reason: str | None = None


class ResponsesAnswer(BaseModel):
    """What stage one reads of a Responses API response (every other field is ignored)."""

    output: list[_OutputItem] = []
    usage: _ResponsesUsage | None = None
    status: str | None = None
    incomplete_details: _Incomplete | None = None


class Answer(NamedTuple):
    """What a response body says: the answer text, the ``(input, output)`` token counts
    (None when the server sent none), the model's refusal (when it declined and wrote no
    text) and whether the output token limit cut the answer."""

    text: str | None
    counts: tuple[int, int] | None
    refusal: str | None = None
    cut: bool = False


def read_answer(raw: bytes, *, api: str) -> Answer:
    """Read a response body; the text of a Responses answer joins its ``output_text``
    parts, as the client's ``output_text`` does. Raises ``ValidationError`` for a body that
    is not such a response."""
    refusal: str | None
    if api == "responses":
        response = ResponsesAnswer.model_validate_json(raw)
        parts = [
            part
            for item in response.output
            if item.type == "message"
            for part in item.content or ()
        ]
        text: str | None = "".join(p.text or "" for p in parts if p.type == "output_text")
        refusal = "".join(p.refusal or "" for p in parts if p.type == "refusal") or None
        usage = response.usage
        counts = (usage.input_tokens, usage.output_tokens) if usage else None
        reason = response.incomplete_details.reason if response.incomplete_details else None
        cut = response.status == "incomplete" and reason == "max_output_tokens"
        if reason == "content_filter" and not text:
            refusal = refusal or "content_filter"
    else:
        completion = ChatAnswer.model_validate_json(raw)
        choice = completion.choices[0] if completion.choices else None
        text = choice.message.content if choice else None
        refusal = choice.message.refusal if choice else None
        if choice is not None and choice.finish_reason == "content_filter" and not text:
            refusal = refusal or "content_filter"
        cut = choice is not None and choice.finish_reason == "length"
        chat_usage = completion.usage
        counts = (chat_usage.prompt_tokens, chat_usage.completion_tokens) if chat_usage else None
    if text and text.strip():
        refusal = None  # an answer with text is judged by its text
    return Answer(text, counts, refusal, cut)


#: True while a request is sent on the run's pace: the client does not retry its 429.
_PACED: ContextVar[bool] = ContextVar("memkiln_paced", default=False)


#: Told when the request this thread sends has left (``OpenAIBackend._call``), if any.
_LEAVING: ContextVar[Left | None] = ContextVar("memkiln_leaving", default=None)


class Client(openai.OpenAI):
    """The official client, except that a request sent on the run's pace (a session's
    single stage-one request) is not retried by the client after a 429: the run's controller
    pauses every request for the time the service asked and sends it again
    (``memkiln.llm.ratelimit``). Every other retry stays the client's. A request whose
    departure is asked for (``_LEAVING``) carries the HTTP stack's ``trace`` extension, which
    tells when its body was written to the connection."""

    def _should_retry(self, response: httpx2.Response) -> bool:
        if response.status_code == 429 and _PACED.get():
            return False
        return super()._should_retry(response)

    def _prepare_request(self, request: httpx2.Request) -> None:
        super()._prepare_request(request)
        left = _LEAVING.get()
        if left is not None:  # built again for each of the client's retries: the last one's
            request.extensions["trace"] = partial(_departed, left)


def _departed(left: Left, event: str, info: Mapping[str, Any]) -> None:
    """The ``trace`` extension of a request: it left when its body was written."""
    if event.endswith(".send_request_body.complete"):
        left.at = now()


def open_client(**options: Any) -> openai.OpenAI:
    """A ``Client`` whose per-request headers are already worked out: that detects the
    platform once (reading the interpreter's binary, about 20 ms), which the first requests
    would otherwise all do at the same time."""
    client = Client(**options)
    client.platform_headers()
    return client


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a 429 asks to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        at = email.utils.parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError):
        return None
    return None if at is None else max(0.0, at.timestamp() - time.time())


def refused(exc: openai.RateLimitError) -> Seen:
    """What a 429 said: the limits, the time to wait, and whether the request may go again
    (not when the quota is spent: no wait makes it succeed)."""
    headers = exc.response.headers
    spent = exc.code == "insufficient_quota"
    return seen_in(headers, limited=True, retry_after=retry_after(headers), retry=not spent)


@dataclass
class Left:
    """When a request left for the service: when its body was written to the connection
    (``Client``); until then, when its hold ended, or when the call started."""

    at: datetime


#: A blocking call and the future of its result.
_Job = tuple[Callable[[], Any], Future[Any]]


class DaemonThreads:
    """A fixed set of daemon threads that run blocking calls for the event loop.

    Daemon threads (unlike ``ThreadPoolExecutor``'s) are not waited for when the process
    exits, so an interrupted run stops at once instead of waiting for the requests in flight.
    """

    def __init__(self, size: int, *, name: str) -> None:
        self._calls: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[], T]) -> Future[T]:
        """Queue ``call`` for the next free thread."""
        future: Future[T] = Future()
        self._calls.put((call, future))
        return future

    async def run(self, call: Callable[[], T]) -> T:
        """Run ``call`` in one of the threads; the event loop waits without blocking."""
        return await asyncio.wrap_future(self.submit(call))

    def shutdown(self) -> None:
        """Let every thread end once the calls already submitted are done."""
        for _ in self._threads:
            self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller, as an executor does
                future.set_exception(exc)


@dataclass(frozen=True)
class _Reply:
    """One answer of a chunked session's requests: its memory, or why there is none."""

    output: StageOneOutput | None
    reason: str | None = None
    detail: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    sent: bool = False
    #: the limits the answer stated
    seen: Seen | None = None


@dataclass
class _Spent:
    """The requests, tokens and cost of a chunked session so far."""

    chunk_requests: int = 0
    merge_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    #: the limits the last answer stated
    seen: Seen | None = None

    def add(self, base: Outcome, replies: list[_Reply], *, merge: bool) -> Outcome | None:
        """Count ``replies``; the session's failed outcome when one of them failed."""
        for r in replies:
            if merge:
                self.merge_requests += r.sent
            else:
                self.chunk_requests += r.sent
            self.input_tokens += r.input_tokens
            self.output_tokens += r.output_tokens
            if self.cost_usd is not None:
                self.cost_usd = None if r.cost_usd is None else self.cost_usd + r.cost_usd
            self.seen = r.seen or self.seen
        failed = next((r for r in replies if r.output is None), None)
        if failed is None:
            return None
        return replace(base, reason=failed.reason, detail=failed.detail, **self.usage(base))

    def usage(self, base: Outcome) -> dict[str, Any]:
        """The outcome fields of what was spent (and of ``base``'s chunk counts)."""
        return {
            "input_hash": base.input_hash,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "started_at": base.started_at,
            "sent": True,
            "chunk_requests": self.chunk_requests,
            "merge_requests": self.merge_requests,
            "chunks_mid_turn": base.chunks_mid_turn,
            "chunks_cut": base.chunks_cut,
            "limits": None if self.seen is None else self.seen.to_wire(),
        }


def _built(prompt: StageOneInput) -> StageOneInput:
    """A message already built, as ``OpenAIBackend._ask`` takes one."""
    return prompt


class OpenAIBackend:
    """Any OpenAI-compatible endpoint (OpenAI, Azure, vLLM, Ollama, llama.cpp server).

    The blocking client runs in threads of the backend's own, one per request in flight:
    its HTTP stack needs less CPU per request than the async one, and the steps of a
    request wait only for the GIL, not for their turn among all the others on the event
    loop (``bench/RESULTS.md``). The client is built in one of these threads while the store
    is opened and the first requests are prepared.
    """

    name = "openai"

    def __init__(self, settings: Settings, *, rules: RuleSet) -> None:
        key = openai_api_key(settings)
        self.model = settings.model
        self.api = settings.api
        self.rules = rules
        self.context_window = settings.context_window
        self.max_output_tokens = settings.max_output_tokens
        self.prices = PriceBook(settings.prices)
        schema = stage_one_json_schema()
        self._response_format = {
            "type": "json_schema",
            "json_schema": {"name": "stage_one_output", "schema": schema, "strict": True},
        }
        self._text_format = {
            "format": {
                "type": "json_schema",
                "name": "stage_one_output",
                "schema": schema,
                "strict": True,
            }
        }
        self._threads = DaemonThreads(settings.concurrency, name="openai")
        self._client: Future[openai.OpenAI] = self._threads.submit(
            partial(
                open_client,
                api_key=key,
                base_url=settings.base_url,
                timeout=settings.request_timeout_s,
                max_retries=settings.max_retries,
            )
        )

    @property
    def client(self) -> openai.OpenAI:
        """The client, once built (building it loads the TLS certificates, about 50 ms)."""
        return self._client.result()

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        """USD for a request's tokens (None: the model's price is unknown)."""
        return self.prices.cost(self.name, self.model, tokens_in, tokens_out)

    async def extract(self, request: Request) -> Outcome:
        if request.parts:
            return await self.extract_parts(request)
        started = now()
        prompt = request.prompt
        base = Outcome(
            request.rollout_id,
            OutcomeKind.FAILED,
            input_hash=request.input_hash,
            started_at=started,
            chunks_cut=int(prompt.truncation.truncated),
        )
        over = window_shortfall(
            (prompt,), reserve=self.max_output_tokens, window=self.context_window
        )
        if over:
            return replace(base, reason=FailureReason.CONTEXT_OVERFLOW, detail=over)
        # held in the backend's thread until the window's edge the run's pace set, its body
        # built first: the request leaves at the edge, and it started when it left
        left = Left(started)
        sent = replace(base, sent=True)  # from here on, a request goes to the model
        try:
            parsed, tokens_in, tokens_out, seen = await self._threads.run(
                partial(self._call, prompt, paced=True, until=HOLD.get(), left=left)
            )
        except openai.APIError as exc:
            reason, detail = failed_call(exc, rules=self.rules)
            limits = refused(exc).to_wire() if isinstance(exc, openai.RateLimitError) else None
            return replace(sent, reason=reason, detail=detail, limits=limits, started_at=left.at)
        except ValidationError as exc:  # a 200 whose body is not a response of this API
            return replace(
                sent, reason=FailureReason.INVALID_JSON, detail=body_problem(exc),
                started_at=left.at,
            )  # fmt: skip
        usage: dict[str, Any] = {
            "input_hash": request.input_hash,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cost_usd": self.cost(tokens_in, tokens_out),
            "started_at": left.at,
            "sent": True,
            "chunks_cut": base.chunks_cut,
            "limits": seen.to_wire(),
        }
        if parsed.output is None:
            return Outcome(
                request.rollout_id,
                OutcomeKind.FAILED,
                reason=parsed.reason,
                detail=redact_text(clean_text(parsed.detail or ""), rules=self.rules),
                **usage,
            )
        return finalize(request.rollout_id, parsed.output, rules=self.rules, **usage)

    async def extract_parts(self, request: Request) -> Outcome:
        """A session over the budget: one request per chunk, then requests that merge the
        chunks' partial memories into one stage-one output (in rounds, when the partials do
        not fit one request). Any failed request fails the whole session, nothing of it
        stored, with the tokens and cost of every request sent."""
        await hold(HOLD.get())  # its first requests go at the window's edge the pace set
        started = now()
        base = Outcome(
            request.rollout_id,
            OutcomeKind.FAILED,
            input_hash=request.input_hash,
            started_at=started,
            chunks_mid_turn=sum(c.mid_turn for c in request.chunks),
            chunks_cut=request.parts.cut,
        )
        over = window_shortfall(
            request.parts, reserve=self.max_output_tokens, window=self.context_window
        )
        if over:
            return replace(base, reason=FailureReason.CONTEXT_OVERFLOW, detail=over)
        spent = _Spent()
        total = len(request.parts)
        # each chunk's message is built in the thread that sends it: only those in flight
        # are held (``ChunkParts``)
        parts = request.parts
        replies = await asyncio.gather(*(self._ask(partial(parts.build, n)) for n in range(total)))
        outcome = spent.add(base, replies, merge=False)
        if outcome is not None:
            return outcome
        # (first part, last part, memory) of each partial memory with something in it
        partials = [
            (n, n, r.output)
            for n, r in enumerate(replies, start=1)
            if r.output is not None and not r.output.is_noop
        ]
        path, cwd = request.header
        empty = build_stage_one_merge_input(
            rollout_path=path, rollout_cwd=cwd, partials="", context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
        )  # fmt: skip
        while partials:
            blocks = [partial_block(first, last, total, out) for first, last, out in partials]
            groups = merge_groups([count_tokens(b) for b in blocks], budget=empty.truncation.budget)
            final = len(groups) == 1
            merges = [
                build_stage_one_merge_input(
                    rollout_path=path,
                    rollout_cwd=cwd,
                    partials="\n".join(blocks[i] for i in g),
                    context_window=self.context_window,
                    max_output_tokens=self.max_output_tokens,
                )
                for g in groups
                if final or len(g) > 1
            ]
            base = replace(base, chunks_cut=base.chunks_cut + sum(
                m.truncation.truncated for m in merges))  # fmt: skip
            replies = await asyncio.gather(*(self._ask(partial(_built, m)) for m in merges))
            outcome = spent.add(base, replies, merge=True)
            if outcome is not None:
                return outcome
            outputs = [r.output for r in replies if r.output is not None]
            if final:
                return finalize(request.rollout_id, outputs[0], rules=None, **spent.usage(base))
            merged = iter(outputs)
            kept = []
            for g in groups:  # a lone partial goes on to the next round as it is
                first, last = partials[g[0]][0], partials[g[-1]][1]
                out = next(merged) if len(g) > 1 else partials[g[0]][2]
                if not out.is_noop:
                    kept.append((first, last, out))
            partials = kept
        return Outcome(request.rollout_id, OutcomeKind.SUCCEEDED_NO_OUTPUT, **spent.usage(base))

    async def _ask(self, build: Callable[[], StageOneInput]) -> _Reply:
        """One request of a chunked session, its message built (``build``) in the thread
        that sends it, its answer parsed and made safe."""
        try:
            parsed, tokens_in, tokens_out, seen = await self._threads.run(
                lambda: self._call(build())
            )
        except openai.APIError as exc:
            return _Reply(None, *failed_call(exc, rules=self.rules), sent=True)
        except ValidationError as exc:  # a 200 whose body is not a response of this API
            return _Reply(None, FailureReason.INVALID_JSON, body_problem(exc), sent=True)
        # sent one by one, never in a batch: the ordinary price, whatever the backend
        cost = self.prices.cost(OpenAIBackend.name, self.model, tokens_in, tokens_out)
        if parsed.output is None:
            detail = redact_text(clean_text(parsed.detail or ""), rules=self.rules)
            return _Reply(
                None, parsed.reason, detail, tokens_in, tokens_out, cost, sent=True, seen=seen
            )
        output = safe_strings(parsed.output, rules=self.rules)
        return _Reply(output, None, None, tokens_in, tokens_out, cost, sent=True, seen=seen)

    def request_body(self, prompt: StageOneInput) -> tuple[str, dict[str, Any]]:
        """The path and body of a stage-one request (the Batch API sends the same body)."""
        if self.api == "responses":
            return "/responses", {
                "model": self.model,
                "instructions": prompt.system,
                "input": prompt.user,
                "max_output_tokens": self.max_output_tokens,
                "text": self._text_format,
            }
        return "/chat/completions", {
            "model": self.model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            "max_completion_tokens": self.max_output_tokens,
            "response_format": self._response_format,
        }

    def judge(self, raw: bytes, *, fallback_tokens: int = 0) -> tuple[Parsed, int, int]:
        """Read and judge an answer's body; its token counts (``fallback_tokens`` in when the
        server sent none). Raises ``ValidationError`` for a body that is not an answer."""
        answer = read_answer(raw, api=self.api)
        tokens_in, tokens_out = answer.counts or (fallback_tokens, 0)
        parsed = judge_stage_one(
            answer.text,
            refusal=answer.refusal,
            cut=answer.cut,
            max_output_tokens=self.max_output_tokens,
        )
        return parsed, tokens_in, tokens_out

    def _call(
        self,
        prompt: StageOneInput,
        *,
        paced: bool = False,
        until: float | None = None,
        left: Left | None = None,
    ) -> tuple[Parsed, int, int, Seen]:
        # Runs in one of the backend's threads, parsing the answer too, so that the event
        # loop only hands out requests and collects outcomes. The body goes out as it is
        # through the client's own ``post`` (the same auth, timeouts, retries and errors as
        # ``create``) and only what is used is read back: ``create`` runs its typed-parameter
        # transform over the messages on every request and the typed response is built field
        # by field, together about half of the client's CPU per request.
        # held until the wall-clock time ``until`` once the body is built; ``left`` is told
        # when the request left
        path, body = self.request_body(prompt)
        client = self.client  # built before the edge (a fresh process's first: 0.1-0.2 s)
        wait_until(until)
        if left is not None:
            left.at = now()
        on_pace, leaving = _PACED.set(paced), _LEAVING.set(left)
        try:
            response = client.post(path, body=body, cast_to=httpx2.Response, options=BEARER_AUTH)
        finally:
            _LEAVING.reset(leaving)
            _PACED.reset(on_pace)
        answer = read_answer(response.content, api=self.api)
        tokens_in, tokens_out = answer.counts or (count_tokens(prompt.user), 0)
        parsed = judge_stage_one(
            answer.text,
            refusal=answer.refusal,
            cut=answer.cut,
            max_output_tokens=self.max_output_tokens,
        )
        return parsed, tokens_in, tokens_out, seen_in(response.headers)

    async def consolidate(self, prompt: ConsolidationInput) -> ConsolidationResult:
        """One structured call for a project's MEMORY.md, memory_summary.md and skills."""
        tokens_in = count_tokens(prompt.system) + count_tokens(prompt.user)
        # the window left after the input, up to 16,000: a small window's model gets what fits
        tokens_out = consolidation_output_tokens(tokens_in, self.context_window)
        if tokens_out is None:
            needed = tokens_in + CONSOLIDATION_MIN_OUTPUT
            return ConsolidationResult(
                None,
                FailureReason.CONTEXT_OVERFLOW,
                f"{needed} tokens needed, window {self.context_window}",
            )
        schema = strict_schema(ConsolidationOutput)

        def create() -> ChatCompletion:
            return self.client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user},
                ],
                max_completion_tokens=tokens_out,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "consolidation", "schema": schema, "strict": True},
                },
            )

        try:
            completion = await self._threads.run(create)
        except openai.APIError as exc:
            return ConsolidationResult(None, *failed_call(exc, rules=self.rules))
        choice = completion.choices[0] if completion.choices else None
        text = choice.message.content if choice else None
        refusal = choice.message.refusal if choice else None
        usage = completion.usage
        tokens = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
        if refusal and not (text and text.strip()):
            detail = redact_text(clean_text(" ".join(refusal.split())[:300]), rules=self.rules)
            return ConsolidationResult(None, FailureReason.REFUSED, detail, *tokens)
        if choice is not None and choice.finish_reason == "length":
            return ConsolidationResult(
                None, FailureReason.TRUNCATED, "the answer reached its limit", *tokens
            )
        value, reason, why = parse_model(text, ConsolidationOutput)
        if value is not None:
            value = safe_strings(value, rules=self.rules)
        return ConsolidationResult(value, reason, why, *tokens)

    async def aclose(self) -> None:
        self._threads.shutdown()
        self.client.close()
