"""The fake OpenAI server, driven by the real ``openai`` client over a real socket."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from tests.fake_openai import FakeOpenAI, Reply, last_user_text
from tests.fake_openai import fake_openai as fake_openai  # the fixture, until conftest loads it

REPO = Path(__file__).resolve().parents[1]

STAGE_ONE_SCHEMA = {
    "type": "object",
    "properties": {
        "raw_memory": {"type": "string"},
        "rollout_summary": {"type": "string"},
        "rollout_slug": {"type": ["string", "null"]},
    },
    "required": ["raw_memory", "rollout_summary", "rollout_slug"],
    "additionalProperties": False,
}
STAGE_ONE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "stage_one", "schema": STAGE_ONE_SCHEMA, "strict": True},
}
PROMPT = (
    "Below is one recorded session of a coding agent, for memory extraction.\n\n"
    "rollout_path: sessions/2026/05/rollout-abc.jsonl\n"
    "rollout_cwd: /home/dev/project\n\n"
    "<rollout_contents>\n{}\n</rollout_contents>\n"
)


def _chat(client: openai.OpenAI, prompt: str = PROMPT) -> str:
    """One stage-one chat completion; the assistant content."""
    completion = client.chat.completions.create(
        model="fake-model",
        messages=[
            {"role": "system", "content": "You are memkiln's memory extractor."},
            {"role": "user", "content": prompt},
        ],
        response_format=STAGE_ONE_FORMAT,
    )
    content = completion.choices[0].message.content
    assert content is not None
    return content


class StageOne(BaseModel):
    """The stage-one answer, as a pydantic model for the ``.parse`` helpers."""

    raw_memory: str
    rollout_summary: str
    rollout_slug: str | None


class Note(BaseModel):
    """A nested object in a non-stage-one schema."""

    title: str
    tags: list[str]


class Consolidation(BaseModel):
    """A schema with other keys, as a later consolidation phase might use."""

    memory_md: str
    sections: list[str]
    note: Note
    parent: str | None
    score: int


def test_chat_completion_with_json_schema_returns_the_stage_one_json(
    fake_openai: FakeOpenAI,
) -> None:
    client = fake_openai.client()
    completion = client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": PROMPT}],
        response_format=STAGE_ONE_FORMAT,
    )
    data = json.loads(completion.choices[0].message.content or "")
    assert set(data) == {"raw_memory", "rollout_summary", "rollout_slug"}
    assert data["raw_memory"].startswith("---\ndescription: ")
    assert "\ntask_outcome: success\ncwd: /home/dev/project\nkeywords: " in data["raw_memory"]
    assert "\n---\n### Task 1: " in data["raw_memory"]
    assert data["rollout_summary"].startswith("# ")
    assert "sessions/2026/05/rollout-abc.jsonl" in data["rollout_summary"]
    assert data["rollout_slug"].startswith("fake-rollout-")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(PROMPT) // 4
    assert completion.usage.completion_tokens == len(completion.choices[0].message.content) // 4
    body = fake_openai.requests[0]["body"]
    assert body["response_format"]["json_schema"]["strict"] is True


def test_the_answer_is_deterministic_and_differs_per_prompt(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    first, again = _chat(client), _chat(client)
    other = _chat(client, PROMPT.replace("rollout-abc", "rollout-xyz"))
    assert first == again
    assert other != first
    assert "rollout-xyz" in json.loads(other)["rollout_summary"]


def test_chat_parse_helper_fills_a_pydantic_model(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    completion = client.chat.completions.parse(
        model="fake-model",
        messages=[{"role": "user", "content": PROMPT}],
        response_format=StageOne,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, StageOne)
    assert parsed.rollout_summary.startswith("# ")


def test_any_other_strict_schema_is_served_generically(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    completion = client.chat.completions.parse(
        model="fake-model",
        messages=[{"role": "user", "content": "consolidate these"}],
        response_format=Consolidation,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Consolidation)
    assert parsed.memory_md
    assert parsed.sections == []
    assert parsed.note.tags == []
    assert parsed.parent is None


def test_responses_create_returns_output_text(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    response = client.responses.create(
        model="fake-model",
        instructions="You are memkiln's memory extractor.",
        input=[{"role": "user", "content": PROMPT}],
        text={
            "format": {
                "type": "json_schema",
                "name": "stage_one",
                "schema": STAGE_ONE_SCHEMA,
                "strict": True,
            }
        },
    )
    data = json.loads(response.output_text)
    assert set(data) == {"raw_memory", "rollout_summary", "rollout_slug"}
    assert "sessions/2026/05/rollout-abc.jsonl" in data["rollout_summary"]
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.output_tokens == len(response.output_text) // 4
    assert fake_openai.count("/responses") == 1


def test_responses_parse_helper_accepts_a_plain_string_input(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    response = client.responses.parse(model="fake-model", input=PROMPT, text_format=StageOne)
    assert isinstance(response.output_parsed, StageOne)
    assert response.output_parsed.rollout_slug is not None


def test_models_lists_the_fake_model_and_unknown_paths_are_404(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    assert [m.id for m in client.models.list()] == ["fake-model"]
    with pytest.raises(openai.NotFoundError) as info:
        client.embeddings.create(model="fake-model", input="x")
    assert info.value.response.json()["error"]["type"] == "invalid_request_error"


def test_scripted_kinds_shape_the_content_in_order(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        Reply(kind="noop"),
        Reply(kind="extra_key"),
        Reply(kind="missing_key"),
        Reply(kind="broken_json"),
        Reply(kind="secret"),
        Reply(kind="content", content="plain words"),
    )
    client = fake_openai.client()
    assert json.loads(_chat(client)) == {
        "raw_memory": "",
        "rollout_summary": "",
        "rollout_slug": None,
    }
    assert json.loads(_chat(client))["extra"] == "x"
    assert "rollout_summary" not in json.loads(_chat(client))
    with pytest.raises(json.JSONDecodeError):
        json.loads(_chat(client))
    secret_memory = json.loads(_chat(client))["raw_memory"]
    assert f"the key is {Reply().secret}" in secret_memory
    assert "password=hunter2hunter2" in secret_memory
    assert _chat(client) == "plain words"
    assert set(json.loads(_chat(client))) == {"raw_memory", "rollout_summary", "rollout_slug"}


def test_a_scripted_429_is_a_rate_limit_error_with_its_retry_after_header(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(Reply(kind="status", status=429, retry_after=2))
    with pytest.raises(openai.RateLimitError) as info:
        _chat(fake_openai.client(max_retries=0))
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.code == "rate_limit_exceeded"
    assert fake_openai.count() == 1


def test_a_scripted_500_is_an_internal_server_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(kind="status", status=500))
    with pytest.raises(openai.InternalServerError):
        _chat(fake_openai.client(max_retries=0))


def test_the_client_retries_a_429_itself_when_allowed(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(kind="status", status=429, retry_after=0.01))
    content = _chat(fake_openai.client(max_retries=1))
    assert json.loads(content)["rollout_slug"].startswith("fake-rollout-")
    assert fake_openai.count("/chat/completions") == 2


def test_a_timeout_reply_becomes_an_api_timeout_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(kind="timeout"))
    with pytest.raises(openai.APITimeoutError):
        _chat(fake_openai.client(timeout=0.5, max_retries=0))
    assert fake_openai.count("/chat/completions") == 1


def test_count_filters_by_path_suffix(fake_openai: FakeOpenAI) -> None:
    client = fake_openai.client()
    _chat(client)
    _chat(client)
    client.models.list()
    assert fake_openai.count() == 3
    assert fake_openai.count("/chat/completions") == 2
    assert fake_openai.count("/models") == 1
    assert fake_openai.count("/responses") == 0


def test_route_answers_per_rollout_and_falls_back_to_the_default(fake_openai: FakeOpenAI) -> None:
    def chooser(body: dict) -> Reply | None:
        if "rollout-bad" in last_user_text(body):
            return Reply(kind="status", status=400)
        return None

    fake_openai.route(chooser)
    client = fake_openai.client()
    with pytest.raises(openai.BadRequestError):
        _chat(client, PROMPT.replace("rollout-abc", "rollout-bad"))
    assert json.loads(_chat(client))["rollout_slug"]


def test_reset_forgets_requests_script_route_and_latency(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(kind="noop"))
    fake_openai.route(lambda body: Reply(kind="broken_json"))
    fake_openai.default = Reply(kind="extra_key")
    fake_openai.client().models.list()
    fake_openai.latency = 5.0
    fake_openai.reset()
    assert fake_openai.count() == 0
    assert fake_openai.latency == 0.0
    data = json.loads(_chat(fake_openai.client()))
    assert set(data) == {"raw_memory", "rollout_summary", "rollout_slug"}
    assert data["rollout_slug"].startswith("fake-rollout-")


def test_sixteen_requests_with_latency_are_served_concurrently(fake_openai: FakeOpenAI) -> None:
    fake_openai.latency = 0.2
    client = fake_openai.client()
    prompts = [PROMPT.replace("rollout-abc", f"rollout-{i}") for i in range(16)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda p: _chat(client, p), prompts))
    assert fake_openai.count("/chat/completions") == 16
    assert fake_openai.max_in_flight > 1
    assert all(f"rollout-{i}" in json.loads(a)["rollout_summary"] for i, a in enumerate(answers))


def test_the_standalone_server_prints_ready_serves_and_logs(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--log", str(log)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()))
        reader.start()
        reader.join(timeout=30)
        assert ready and ready[0].startswith("READY http://127.0.0.1:"), ready
        base_url = ready[0].split()[1]
        client = openai.OpenAI(base_url=base_url, api_key="test", timeout=10, max_retries=0)
        assert json.loads(_chat(client))["rollout_slug"]
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        assert [line["path"] for line in lines] == ["/v1/chat/completions"]
        assert lines[0]["rollout_hint"] == PROMPT[:200]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_an_unknown_reply_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown Reply kind"):
        Reply(kind="nonsense")


def test_a_server_that_keeps_no_bodies_records_its_requests_without_them() -> None:
    # the standalone server, which a long benchmark sends gigabytes to
    with FakeOpenAI(keep_bodies=False) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
        client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "x" * 1000}]
        )
        assert fake.count("/chat/completions") == 1
        assert fake.requests[0]["body"] is None
