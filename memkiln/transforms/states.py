"""The fixed vocabularies memkiln stores: job states, attempt outcomes, selection decisions
and failure reasons. Each is a ``StrEnum``, so a member is its string everywhere (DuckDB
parameters, Polars literals, JSON) and the stored values stay what they were.

A new state, decision or reason is added here first; the SQL that lists them (views,
audits) is checked against these (``tests/transforms/test_states.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from memkiln.transforms.stage_one_answer import StageOneOutput


class JobStatus(StrEnum):
    """``stage1_jobs.status``: where a session's extraction stands."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SUCCEEDED_NO_OUTPUT = "succeeded_no_output"
    FAILED = "failed"


class OutcomeKind(StrEnum):
    """``stage1_attempts.outcome``: how one attempt ended."""

    SUCCEEDED = "succeeded"
    #: the model found nothing worth keeping (an empty memory, not a failure)
    SUCCEEDED_NO_OUTPUT = "succeeded_no_output"
    FAILED = "failed"
    #: an earlier output for the same input, prompt and model was kept; nothing was sent
    REUSED = "reused"


class ProjectStatus(StrEnum):
    """What consolidation did to a project's folder in a run (a summary's ``projects``);
    ``consolidation_jobs.status`` keeps the last stored one (succeeded, failed or empty: a
    skipped or deferred project keeps its record)."""

    SUCCEEDED = "succeeded"
    #: its inputs and files are those of its last success: nothing to do
    SKIPPED = "skipped"
    FAILED = "failed"
    #: no session of the project has a memory left: its files were removed
    EMPTY = "empty"
    #: left for a later run: its requests would pass the budget
    DEFERRED = "deferred"


#: Job states of a session that needs no extraction for its current version.
DONE_STATUSES = (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED_NO_OUTPUT)


class Decision(StrEnum):
    """``selection_decisions.decision``: what a run decided for each session, and why."""

    TAKE = "take"
    # not meant to be extracted by this run's settings
    SOURCE_NOT_SELECTED = "source_not_selected"
    SUBAGENT = "subagent"
    MEMORY_DISABLED = "memory_disabled"
    NO_USER_MESSAGE = "no_user_message"
    TOO_OLD = "too_old"
    OUTSIDE_RANGE = "outside_range"
    STILL_ACTIVE = "still_active"
    #: its times are missing, before 1990 or in the future (a store written before ingest
    #: quarantined such sessions: they are never sent, nor active for ever)
    BAD_TIMESTAMP = "bad_timestamp"
    # eligible, but not taken by this run
    UP_TO_DATE = "up_to_date"
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    RETRY_LATER = "retry_later"
    LEASED = "leased"
    OVER_RUN_LIMIT = "over_run_limit"


#: Decisions that say a session is not meant to be extracted by this run's settings; every
#: other decision concerns an eligible session (to do, done, waiting or held).
NOT_ELIGIBLE = (
    Decision.SOURCE_NOT_SELECTED,
    Decision.SUBAGENT,
    Decision.MEMORY_DISABLED,
    Decision.NO_USER_MESSAGE,
    Decision.TOO_OLD,
    Decision.OUTSIDE_RANGE,
    Decision.STILL_ACTIVE,
    Decision.BAD_TIMESTAMP,
)


class FailureReason(StrEnum):
    """``stage1_attempts.reason`` and ``consolidation_jobs.last_reason`` of a failed model
    request, or of one not sent."""

    # the service, per request
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    # the whole run: endpoint unreachable, key refused, no such model
    CONNECTION_ERROR = "connection_error"
    AUTH_ERROR = "auth_error"
    NOT_FOUND = "not_found"
    # the request
    BAD_REQUEST = "bad_request"
    CONTEXT_OVERFLOW = "context_overflow"
    CLIENT_ERROR = "client_error"
    # the answer
    INVALID_JSON = "invalid_json"
    SCHEMA_MISMATCH = "schema_mismatch"
    TRUNCATED = "truncated"
    REFUSED = "refused"
    CONTENT_FILTER = "content_filter"
    # the Batch API
    BATCH_UNANSWERED = "batch_unanswered"
    BATCH_FAILED = "batch_failed"
    BATCH_EXPIRED = "batch_expired"
    BATCH_CANCELLED = "batch_cancelled"
    # memkiln itself: the run's spending cap left no room for the request; a bug, reported
    # rather than raised
    BUDGET = "budget"
    INTERNAL_ERROR = "internal_error"


#: Failures of the whole run, not of a session: recorded, not charged to the retry budget.
UNCHARGED_REASONS = (
    FailureReason.CONNECTION_ERROR,
    FailureReason.AUTH_ERROR,
    FailureReason.NOT_FOUND,
)
#: Failures of the service rather than of the session that the client already retried with
#: backoff. They use an attempt (a session that always times out must stop some day), but
#: wait for no retry delay: the next run, as soon as the service is back, sends them again.
TRANSIENT_REASONS = (FailureReason.RATE_LIMITED, FailureReason.SERVER_ERROR, FailureReason.TIMEOUT)
#: Failures the next run retries at once: the run-wide and the transient ones. Every other
#: failure is about the session's answer and waits ``retry_delay_hours``.
RETRY_NOW_REASONS = UNCHARGED_REASONS + TRANSIENT_REASONS


class WriteFailure(StrEnum):
    """``consolidation_jobs.last_reason`` of a project whose memory files could not be
    written."""

    UNSAFE_PATH = "unsafe_path"
    DISK_FULL = "disk_full"
    PERMISSION_DENIED = "permission_denied"
    WRITE_ERROR = "write_error"


class QuarantineReason(StrEnum):
    """``quarantine.reason``: why input could not be read."""

    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    INVALID_UTF8 = "invalid_utf8"
    TRUNCATED_LINE = "truncated_line"
    BINARY_FILE = "binary_file"
    CORRUPT_COMPRESSED = "corrupt_compressed"
    UNREADABLE_FILE = "unreadable_file"
    UNRECOGNIZED_FORMAT = "unrecognized_format"
    DUPLICATE_ROLLOUT = "duplicate_rollout"
    LINE_TOO_LONG = "line_too_long"
    FILE_TOO_LARGE = "file_too_large"
    TOO_MANY_BAD_LINES = "too_many_bad_lines"
    NO_SESSION = "no_session"
    BAD_TIMESTAMP = "bad_timestamp"


@dataclass(frozen=True)
class Outcome:
    """How one stage-one attempt ended."""

    rollout_id: str
    outcome: str  # succeeded | succeeded_no_output | failed | reused
    reason: str | None = None
    detail: str | None = None
    output: StageOneOutput | None = None
    input_hash: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the model's price is unknown
    started_at: datetime | None = None
    sent: bool = False  # a request went to the model (not refused before it, not reused)
    #: a session over the budget (``memkiln.transforms.chunks``): the chunk and merge
    #: requests sent, the chunks that start inside a turn, the chunks cut in the middle
    chunk_requests: int = 0
    merge_requests: int = 0
    chunks_mid_turn: int = 0
    chunks_cut: int = 0
    #: what the call's last answer said of the service's rate limits, as
    #: ``memkiln.llm.ratelimit.Seen.to_wire`` (None: nothing); never stored
    limits: dict[str, Any] | None = None

    @property
    def requests(self) -> int:
        """Model requests this attempt sent."""
        return self.chunk_requests + self.merge_requests or int(self.sent)


@dataclass(frozen=True)
class Finished:
    """An outcome with the job facts needed to record it."""

    result: Outcome
    watermark: datetime | None
    attempt: int
