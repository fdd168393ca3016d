"""One failure, one reason: a request sent alone (the client's exception) and a request in a
Batch API job (its status and message) map through the same table."""

from __future__ import annotations

import httpx
import openai
import pytest

from memkiln.io.rules import load_rules
from memkiln.llm.errors import body_problem, failed_call, failure_reason, status_reason
from memkiln.transforms.states import FailureReason

CASES = [
    (429, "Rate limit reached", FailureReason.RATE_LIMITED),
    (401, "Incorrect API key", FailureReason.AUTH_ERROR),
    (403, "Forbidden", FailureReason.AUTH_ERROR),
    (404, "The model does not exist", FailureReason.NOT_FOUND),
    (400, "This model's maximum context length is 8192 tokens", FailureReason.CONTEXT_OVERFLOW),
    (400, "prompt too long for the context", FailureReason.CONTEXT_OVERFLOW),
    (400, "Invalid schema", FailureReason.BAD_REQUEST),
    (413, "context window exceeded", FailureReason.CONTEXT_OVERFLOW),
    (422, "unprocessable", FailureReason.BAD_REQUEST),
    (500, "context length", FailureReason.SERVER_ERROR),
    (503, "overloaded", FailureReason.SERVER_ERROR),
]


def _client_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, request=request)
    return openai.APIStatusError(message, response=response, body=None)


@pytest.mark.parametrize(("status", "message", "reason"), CASES)
def test_alone_or_in_a_batch_a_failure_gets_the_same_reason(
    status: int, message: str, reason: FailureReason
) -> None:
    assert status_reason(status, message) == reason
    assert failure_reason(_client_error(status, message)) == reason


def test_errors_without_a_status_have_their_own_reasons() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert failure_reason(openai.APITimeoutError(request=request)) == FailureReason.TIMEOUT
    connection = openai.APIConnectionError(request=request)
    assert failure_reason(connection) == FailureReason.CONNECTION_ERROR
    assert failure_reason(RuntimeError("x")) == FailureReason.CLIENT_ERROR


def test_a_failed_calls_detail_is_cut_and_redacted() -> None:
    token = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
    reason, detail = failed_call(
        _client_error(401, f"Incorrect API key provided: {token} " + "x" * 400),
        rules=load_rules(),
    )
    assert reason == FailureReason.AUTH_ERROR
    assert token not in detail and token[:20] not in detail
    assert detail.startswith("APIStatusError: ") and len(detail) <= 300


def test_a_body_that_is_no_answer_says_where() -> None:
    from pydantic import BaseModel, ValidationError

    class Body(BaseModel):
        choices: list[int]

    with pytest.raises(ValidationError) as caught:
        Body.model_validate({"choices": ["x"]})
    assert body_problem(caught.value) == "response body choices.0: int_parsing"
