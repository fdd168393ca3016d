"""The one map from how a model request failed to its fixed reason (``FailureReason``).

A request sent alone fails with an exception of the openai client; a request inside a Batch
API job fails with the HTTP status and message the batch reports for it. Both go through
``status_reason``, so one failure gets one reason whichever way it was sent.
"""

from __future__ import annotations

import openai
from pydantic import ValidationError

from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.states import FailureReason

#: the most of an error's text kept as its detail
DETAIL_CHARS = 300


def status_reason(status: int, message: str) -> FailureReason:
    """The fixed reason of a request the service answered with an error ``status``."""
    if status == 429:
        return FailureReason.RATE_LIMITED
    if status in (401, 403):
        return FailureReason.AUTH_ERROR
    if status == 404:
        return FailureReason.NOT_FOUND
    if status >= 500:
        return FailureReason.SERVER_ERROR
    text = message.lower()
    if "context" in text and ("length" in text or "window" in text or "too long" in text):
        return FailureReason.CONTEXT_OVERFLOW
    return FailureReason.BAD_REQUEST


def failure_reason(exc: BaseException) -> FailureReason:
    """The fixed reason for an exception raised by the openai client."""
    if isinstance(exc, openai.APIStatusError):
        return status_reason(exc.status_code, str(exc))
    if isinstance(exc, openai.APITimeoutError):
        return FailureReason.TIMEOUT
    if isinstance(exc, openai.APIConnectionError):
        return FailureReason.CONNECTION_ERROR
    return FailureReason.CLIENT_ERROR


def failed_call(exc: openai.APIError, *, rules: RuleSet) -> tuple[FailureReason, str]:
    """A client error's reason and its detail (its type and text, cut and redacted)."""
    detail = redact_text(f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS], rules=rules)
    return failure_reason(exc), detail


def body_problem(exc: ValidationError) -> str:
    """The detail of a 200 whose body is not an answer of the API: where and what."""
    problem = exc.errors()[0]
    where = ".".join(str(p) for p in problem["loc"]) or "<root>"
    return f"response body {where}: {problem['type']}"
