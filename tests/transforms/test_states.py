"""The fixed vocabularies are the ones the SQL lists and the code produces."""

from __future__ import annotations

import re
from importlib import resources

import openai
import pytest

from memkiln.llm.errors import failure_reason, status_reason
from memkiln.transforms.states import (
    NOT_ELIGIBLE,
    RETRY_NOW_REASONS,
    Decision,
    FailureReason,
    QuarantineReason,
)

SQL = resources.files("memkiln") / "sql"


def quoted(text: str) -> set[str]:
    return set(re.findall(r"'([a-z0-9_]+)'", text))


def test_quarantine_reasons_match_the_view_and_the_audit() -> None:
    view = (SQL / "views" / "v_quarantine_by_reason.sql").read_text(encoding="utf-8")
    values = re.search(r"reasons\(reason\) as \((.*?)\n\)", view, re.S)
    assert values is not None
    listed = quoted(values.group(1))
    audit = quoted((SQL / "audits" / "quarantine_reasons.sql").read_text(encoding="utf-8"))
    assert listed == set(QuarantineReason)
    assert audit == set(QuarantineReason)


def test_every_decision_is_eligible_or_not_and_take_is_eligible() -> None:
    assert Decision.TAKE not in NOT_ELIGIBLE
    assert set(NOT_ELIGIBLE) < set(Decision)
    assert Decision.TOO_OLD == "too_old"  # a member is its stored string


def test_retry_now_reasons_are_failure_reasons() -> None:
    assert set(RETRY_NOW_REASONS) <= set(FailureReason)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422, 429, 500, 502, 503])
def test_batch_status_reasons_are_members(status: int) -> None:
    assert status_reason(status, "maximum context length exceeded") in set(FailureReason)
    assert status_reason(status, "") in set(FailureReason)


def test_client_failure_reasons_are_members() -> None:
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    errors: list[BaseException] = [
        openai.APIConnectionError(request=request),
        openai.APITimeoutError(request=request),
        RuntimeError("not a client error"),
    ]
    for status, cls in [
        (429, openai.RateLimitError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (400, openai.BadRequestError),
        (500, openai.InternalServerError),
        (418, openai.APIStatusError),
    ]:
        response = httpx.Response(status, request=request)
        errors.append(cls("context length exceeded", response=response, body=None))
    reasons = {failure_reason(exc) for exc in errors}
    assert reasons <= set(FailureReason)
    assert {"rate_limited", "auth_error", "not_found", "context_overflow"} <= reasons


def test_the_stored_project_statuses_are_those_the_schema_names() -> None:
    from memkiln.transforms.states import ProjectStatus

    comments = (SQL / "schema" / "0020_comments.sql").read_text(encoding="utf-8")
    line = next(x for x in comments.splitlines() if "consolidation_jobs.status" in x)
    named = set(re.findall(r"[a-z]+", line.split(" is ", 1)[1]))
    stored = set(ProjectStatus) - {ProjectStatus.SKIPPED, ProjectStatus.DEFERRED}
    assert stored <= named
