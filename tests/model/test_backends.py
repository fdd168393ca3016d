"""The openai backend: what it sends, how it reads the answer, against the local fake server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import polars as pl
import pytest
from pydantic import ValidationError

from memkiln.io.rules import load_rules
from memkiln.llm import backends
from memkiln.llm.backends import DaemonThreads, OpenAIBackend, Request, read_answer
from memkiln.llm.ratelimit import HOLD
from memkiln.llm.ratelimit import wait_until as wait_until_edge
from memkiln.settings import Settings
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.prompts import build_stage_one_input
from memkiln.transforms.states import Outcome
from tests.fake_openai import FakeOpenAI, Reply

STAGE_ONE = {"raw_memory": "m", "rollout_summary": "s", "rollout_slug": "x"}


def chat_body(content: str | None, usage: dict[str, int] | None = None) -> bytes:
    message = {"role": "assistant", "content": content, "refusal": None}
    body = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    return json.dumps(body | ({"usage": usage} if usage else {})).encode()


def test_a_chat_answer_gives_its_text_and_token_counts() -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    assert read_answer(chat_body("hello", usage), api="chat") == ("hello", (120, 30), None, False)
    assert read_answer(chat_body("hello"), api="chat")[:2] == ("hello", None)
    assert read_answer(b'{"choices": []}', api="chat")[:2] == (None, None)


def test_a_refusal_and_an_answer_cut_by_the_limit_are_told_apart_in_both_apis() -> None:
    refused = {"choices": [{"message": {"content": None, "refusal": "I can't help with that."},
                            "finish_reason": "stop"}]}  # fmt: skip
    cut = {"choices": [{"message": {"content": '{"raw_memory": "abc'}, "finish_reason": "length"}]}
    assert (
        read_answer(json.dumps(refused).encode(), api="chat").refusal == "I can't help with that."
    )
    assert read_answer(json.dumps(cut).encode(), api="chat").cut
    r_refused = {
        "output": [{"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}]
    }
    r_cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
             "output": [{"type": "message", "content": [{"type": "output_text", "text": "{"}]}]}  # fmt: skip
    assert read_answer(json.dumps(r_refused).encode(), api="responses").refusal == "No."
    assert read_answer(json.dumps(r_cut).encode(), api="responses").cut


def test_a_responses_answer_joins_the_output_text_of_its_messages() -> None:
    body = {
        "object": "response",
        "output": [
            {"type": "reasoning", "id": "r", "summary": [], "content": None},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": '{"raw_memory": ', "annotations": []},
                    {"type": "refusal", "refusal": "no"},
                    {"type": "output_text", "text": '"m"}', "annotations": []},
                ],
            },
        ],
        "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
    }
    text, counts, refusal, cut = read_answer(json.dumps(body).encode(), api="responses")
    assert text == '{"raw_memory": "m"}' and counts == (7, 3)
    assert refusal is None and not cut  # an answer with text is judged by its text


@pytest.mark.parametrize("raw", [b"<html>busy</html>", b'{"choices": "none"}', b"[]"])
def test_a_body_that_is_no_response_is_refused(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        read_answer(raw, api="chat")


def test_daemon_threads_hand_back_results_and_errors() -> None:
    threads = DaemonThreads(2, name="test-daemon")

    async def use() -> int:
        with pytest.raises(ZeroDivisionError):
            await threads.run(lambda: 1 // 0)
        return await threads.run(lambda: 41 + 1)

    assert asyncio.run(use()) == 42
    mine = [t for t in threading.enumerate() if t.name.startswith("test-daemon-")]
    assert len(mine) == 2 and all(t.daemon for t in mine)  # never waited for at exit
    threads.shutdown()
    for t in mine:
        t.join()


def backend_for(fake: FakeOpenAI, tmp_path: Path, **kw: object) -> OpenAIBackend:
    options: dict[str, object] = {"max_retries": 0, "request_timeout_s": 5} | kw
    settings = Settings(
        db=tmp_path / "m.duckdb",
        backend="openai",
        base_url=fake.base_url,
        model="fake-model",
        **options,  # type: ignore[arg-type]
    )
    return OpenAIBackend(settings, rules=load_rules())


def request() -> Request:
    prompt = build_stage_one_input(
        rollout_path="/home/dev/rollout.jsonl",
        rollout_cwd="/home/dev/shop",
        rollout_contents="[user] add the tax line",
        context_window=None,
    )
    facts = RolloutFacts(rollout_id="r1", cwd="/home/dev/shop", updated_at=None)
    return Request("r1", pl.DataFrame(), facts, prompt, input_hash="h")


def extract_one(
    backend: OpenAIBackend,
    made: Request | None = None,
    *,
    first: Callable[[], object] | None = None,
) -> Outcome:
    """``backend``'s outcome for ``made`` (``request()`` by default) in an event loop of its
    own, ``first`` called in that loop before; the backend closed after."""

    async def run() -> Outcome:
        if first is not None:
            first()
        try:
            return await backend.extract(made or request())
        finally:
            await backend.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_each_api_sends_the_strict_schema_with_the_key_and_reads_the_answer(
    api: str, fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    outcome = extract_one(backend_for(fake_openai, tmp_path, api=api))

    assert outcome.outcome == "succeeded" and outcome.output is not None
    assert outcome.input_tokens > 0 and outcome.output_tokens > 0
    (sent,) = fake_openai.requests
    assert sent["headers"]["authorization"] == "Bearer sk-test-key"
    body = sent["body"]
    if api == "chat":
        assert sent["path"].endswith("/chat/completions")
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        fmt = body["response_format"]["json_schema"]
    else:
        assert sent["path"].endswith("/responses")
        assert "memory extractor" in body["instructions"] and "add the tax line" in body["input"]
        fmt = body["text"]["format"]
    assert fmt["strict"] is True and set(fmt["schema"]["required"]) == set(STAGE_ONE)


def test_a_request_held_to_the_windows_edge_leaves_then_and_started_when_it_left(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run's pace holds a request until the window's edge (``HOLD``): the backend builds
    # its body first and sends it at the edge (the work before it, a cold worker's first
    # call, does not make it late), and its outcome started when it left, as the pace counts
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    backend = backend_for(fake_openai, tmp_path)

    async def run() -> tuple[float, Outcome]:
        edge = time.time() + 0.3
        HOLD.set(edge)
        try:
            return edge, await backend.extract(request())
        finally:
            await backend.aclose()

    edge, outcome = asyncio.run(run())
    assert outcome.outcome == "succeeded" and outcome.started_at is not None
    assert outcome.started_at.timestamp() >= edge


def test_a_request_leaves_with_its_client_built_and_started_when_its_body_was_sent(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fresh process's first request: its client (built in the backend's thread when the
    # backend is) took 0.1-0.2 s more on a Dask worker at a load of 3, after the request's
    # hold had ended. It is built before the edge, and the request counted from when its
    # body was written: the run's pace counts the next window from then
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    gate = threading.Event()
    built: list[float] = []
    real = backends.open_client

    def slow_client(**options: Any) -> openai.OpenAI:
        gate.wait(30)
        built.append(time.time())
        return real(**options)

    monkeypatch.setattr(backends, "open_client", slow_client)
    backend = backend_for(fake_openai, tmp_path)
    at_the_edge: list[bool] = []
    real_wait = wait_until_edge

    def wait_until(until: float | None) -> None:
        at_the_edge.append(backend._client.done())  # the client, once the hold ends
        real_wait(until)

    monkeypatch.setattr(backends, "wait_until", wait_until)

    # the client is built 0.3 s from now
    outcome = extract_one(backend, first=lambda: threading.Timer(0.3, gate.set).start())
    assert outcome.outcome == "succeeded" and outcome.started_at is not None
    assert at_the_edge == [True]
    assert outcome.started_at.timestamp() >= built[0]


def test_a_request_is_counted_from_when_its_body_was_written_to_the_connection(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # whatever delays a request inside the client (a cold process, a starved thread), the
    # outcome's start is when it reached the connection, as the service counts it
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    backend = backend_for(fake_openai, tmp_path)
    http = backend.client._client
    real_send = http.send
    handed: list[float] = []

    def late_send(request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        time.sleep(0.1)  # the client's own work before the request goes
        handed.append(time.time())
        return real_send(request, **kwargs)

    monkeypatch.setattr(http, "send", late_send)

    outcome = extract_one(backend, first=lambda: HOLD.set(None))
    assert outcome.outcome == "succeeded" and outcome.started_at is not None
    assert outcome.started_at.timestamp() >= handed[0]
    # a request the client retried (a 5xx) left when its last try did: every try is traced
    fake_openai.script(Reply("status", status=500))
    backend = backend_for(fake_openai, tmp_path, max_retries=1)
    http = backend.client._client
    real_send = http.send
    handed.clear()
    monkeypatch.setattr(http, "send", late_send)
    outcome = extract_one(backend, first=lambda: HOLD.set(None))
    assert outcome.outcome == "succeeded" and outcome.started_at is not None
    assert len(handed) == 2 and outcome.started_at.timestamp() >= handed[1]


def test_an_answer_that_is_not_the_schema_fails_with_its_reason(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Reply("content", content='{"raw_memory": "m"}')
    outcome = extract_one(backend_for(fake_openai, tmp_path))
    assert (outcome.outcome, outcome.reason) == ("failed", "schema_mismatch")


def test_a_reply_that_is_no_response_at_all_fails_as_invalid_json(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = backend_for(fake_openai, tmp_path)

    def proxy_page(*args: object, **kwargs: object) -> httpx2.Response:
        return httpx2.Response(200, content=b"<html>upstream busy</html>")

    monkeypatch.setattr(backend.client, "post", proxy_page)
    outcome = extract_one(backend)
    assert (outcome.outcome, outcome.reason) == ("failed", "invalid_json")
    assert outcome.detail == "response body <root>: json_invalid"


def test_a_request_larger_than_the_window_fails_without_being_sent(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # the system prompt alone is well over 500 tokens
    outcome = extract_one(backend_for(fake_openai, tmp_path, context_window=500))
    assert (outcome.outcome, outcome.reason) == ("failed", "context_overflow")
    assert outcome.detail is not None and outcome.detail.endswith("tokens needed, window 500")
    assert fake_openai.requests == []


def test_a_window_that_holds_the_request_by_its_size_needs_no_count(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memkiln.transforms import tokens

    def no_encoder() -> None:
        raise AssertionError("the encoder was loaded for a request that fits by its size")

    made = request()
    monkeypatch.setattr(tokens, "encoding", no_encoder)
    assert made.prompt.tokens_needed(4_000, 1_000_000) is None
    backend = backend_for(fake_openai, tmp_path, context_window=1_000_000)

    assert extract_one(backend, made).outcome == "succeeded"
