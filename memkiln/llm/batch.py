"""The OpenAI Batch API's side of stage one (``--backend openai-batch``: half the price, the
answers within a day): a request as a line of the batch's JSONL (``custom_id`` = rollout id,
the body the ``openai`` backend sends) and an answer line read back into an outcome through
the same parsing, redaction and reasons as the synchronous backend. Submitting, polling,
waiting and applying Batch API jobs against the store: ``memkiln.pipeline.batch_jobs``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from memkiln.io.store import now
from memkiln.llm.backends import OpenAIBackend, Request, finalize
from memkiln.llm.errors import status_reason
from memkiln.transforms.redact import redact_text
from memkiln.transforms.states import FailureReason, Outcome, OutcomeKind
from memkiln.transforms.text import clean_text

OWNER_PREFIX = "batch:"
#: Batch statuses after which no answer will come.
ENDED = ("completed", "failed", "expired", "cancelled")
#: How long the jobs of a batch are held (the Batch API's window is 24 hours).
BATCH_LEASE = timedelta(days=7)


class OpenAIBatchBackend(OpenAIBackend):
    """The ``openai`` backend's requests, sent as batches (see the module's docstring)."""

    name = "openai-batch"

    async def extract(self, request: Request) -> Outcome:  # pragma: no cover - not per request
        raise NotImplementedError(
            "openai-batch sends batches: see memkiln.pipeline.batch_jobs.submit"
        )

    def line(self, request: Request) -> dict[str, Any]:
        path, body = self.request_body(request.prompt)
        return {
            "custom_id": request.rollout_id,
            "method": "POST",
            "url": f"/v1{path}",
            "body": body,
        }

    def outcome(self, rollout_id: str, item: dict[str, Any] | None, input_hash: str) -> Outcome:
        """The outcome of one line of a batch's output or error file (None: no answer)."""
        base = Outcome(
            rollout_id, OutcomeKind.FAILED, input_hash=input_hash, started_at=now(), sent=True
        )
        if item is None:
            return replace(
                base, reason=FailureReason.BATCH_UNANSWERED, detail="no answer in the batch"
            )
        if not item.get("error") and not isinstance(item.get("response"), dict):
            return replace(
                base, reason=FailureReason.INVALID_JSON, detail="batch line without a response"
            )
        response = _object(item.get("response"))
        status = response.get("status_code")
        status = status if isinstance(status, int) else 0
        if item.get("error") or status != 200:
            error = item.get("error") or _object(response.get("body")).get("error") or {}
            message = str(_object(error).get("message") or error)[:300]
            detail = redact_text(clean_text(f"status {status}: {message}"), rules=self.rules)
            return replace(base, reason=status_reason(status, message), detail=detail)
        try:
            parsed, tokens_in, tokens_out = self.judge(json.dumps(response.get("body")).encode())
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "<root>"
            return replace(base, reason=FailureReason.INVALID_JSON, detail=f"response body {where}")
        usage: dict[str, Any] = {
            "input_hash": input_hash,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cost_usd": self.cost(tokens_in, tokens_out),
            "started_at": base.started_at,
            "sent": True,
        }
        if parsed.output is None:
            detail = redact_text(clean_text(parsed.detail or ""), rules=self.rules)
            return Outcome(
                rollout_id, OutcomeKind.FAILED, reason=parsed.reason, detail=detail, **usage
            )
        return finalize(rollout_id, parsed.output, rules=self.rules, **usage)


def batch_answers(text: str) -> dict[str, dict[str, Any]]:
    """The lines of a batch's output or error file, by ``custom_id``. The file comes from the
    service: a line that is not a JSON object with a string ``custom_id`` (a download cut
    short, a proxy's page) is left out, so its session ends ``batch_unanswered`` and is sent
    again, instead of the whole file stopping every run that collects it."""
    answers: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("custom_id"), str):
            answers[item["custom_id"]] = item
    return answers


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
