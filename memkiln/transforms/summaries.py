"""What a run did, per phase (the summary objects, whose counters also go to the ``runs``
table), and how it reads: sections (printed by the CLI, published by each flow run as a
markdown artifact and through Prefect's run logger), notes and the exit code. Pure; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from memkiln.transforms.estimate import Estimate, format_cost
from memkiln.transforms.report import Section, exit_code, number


@dataclass
class IngestSummary:
    """Counts of one ingest run (also stored in the ``runs`` table)."""

    run_id: str = ""
    files_seen: int = 0
    files_new: int = 0
    files_changed: int = 0
    files_skipped: int = 0
    files_failed: int = 0
    bytes_read: int = 0
    rollouts: int = 0
    items: int = 0
    quarantined: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    #: one line per file and reason of what was quarantined (shown after the summary)
    set_aside: list[str] = field(default_factory=list)

    def counters(self) -> dict[str, float]:
        return {
            "files_seen": self.files_seen,
            "files_new": self.files_new,
            "files_changed": self.files_changed,
            "files_skipped": self.files_skipped,
            "files_failed": self.files_failed,
            "bytes_read": self.bytes_read,
            "rollouts": self.rollouts,
            "items": self.items,
            "quarantined": self.quarantined,
            "secrets_redacted": sum(self.hits.values()),
        }


@dataclass
class ExtractSummary:
    """What one extraction run did."""

    run_id: str = ""
    considered: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # "failed:rate_limited" etc.
    orphans_taken_over: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    stopped: str | None = None  # why the run stopped before sending every session
    #: the run stopped because the next request would have passed the budget
    budget_reached: bool = False
    #: false when a request's model has no known price (its cost is not in cost_usd)
    price_known: bool = True
    #: sessions selected to extract this run
    taken: int = 0
    #: a dry run's counts and estimate (no model was called)
    estimate: Estimate | None = None
    #: openai-batch: requests sent in this run's batch, and batches still running
    batched: int = 0
    batches_open: int = 0
    #: sessions whose attempt in this run failed (every reason); the CLI exits 1 when > 0
    sessions_failed: int = 0
    #: sessions over the budget, extracted in chunks; their chunk and merge requests; chunks
    #: (or single messages) cut in the middle because one item alone was over the budget
    sessions_chunked: int = 0
    chunk_requests: int = 0
    merge_requests: int = 0
    chunks_cut: int = 0
    #: requests the service refused for a rate limit (each went again once admitted)
    rate_limited: int = 0
    #: the hard budget (None: none), what earlier phases of the invocation spent, and the
    #: most this run held reserved at once for requests in flight (their worst case)
    budget_usd: float | None = None
    spent_before_usd: float = 0.0
    reserved_usd: float = 0.0

    def counters(self) -> dict[str, float | None]:
        """The ``runs`` table's counters of this run."""
        failed = sum(n for key, n in self.outcomes.items() if key.startswith("failed"))
        return {
            "sessions_considered": self.considered,
            "sessions_succeeded": self.outcomes.get("succeeded", 0),
            "sessions_no_output": self.outcomes.get("succeeded_no_output", 0),
            "sessions_failed": failed,
            "sessions_reused": self.outcomes.get("reused", 0),
            "model_requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd if self.price_known else None,
        }


@dataclass
class ConsolidateSummary:
    run_id: str = ""
    projects: dict[str, str] = field(default_factory=dict)  # project -> status
    written: int = 0
    removed: int = 0
    # project (shown on one line, capped) or "INDEX.md" -> "reason: detail", one line each
    failures: dict[str, str] = field(default_factory=dict)
    #: projects whose files could not be written (the index counts as one when it failed);
    #: the others were still written
    projects_failed: int = 0
    #: model requests of phase 2, their tokens and cost (cost of known prices only)
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    price_known: bool = True
    #: why projects were left for the next run (the budget), if any were
    stopped: str | None = None
    #: memory lines the risk and copied-instruction filters dropped, per reason
    #: (``risky:<risk>``, ``copied_instruction``)
    dropped: dict[str, int] = field(default_factory=dict)

    def counters(self) -> dict[str, float | None]:
        """The ``runs`` table's counters of this run."""
        statuses = list(self.projects.values())
        return {
            "projects": len(statuses),
            "projects_written": statuses.count("succeeded"),
            "projects_skipped": statuses.count("skipped") + statuses.count("deferred"),
            "projects_failed": self.projects_failed,
            "files_written": self.written,
            "files_removed": self.removed,
            "memory_lines_dropped": sum(self.dropped.values()),
            "model_requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd if self.price_known else None,
        }


def ingest_section(s: IngestSummary) -> Section:
    rows: list[tuple[str, float | str]] = [
        ("files seen", s.files_seen),
        ("  new", s.files_new),
        ("  changed", s.files_changed),
        ("  skipped (unchanged)", s.files_skipped),
        ("  failed (unreadable, corrupt, binary, not a session)", s.files_failed),
        ("MB read", f"{s.bytes_read / 1e6:,.1f}"),
        ("rollouts written", s.rollouts),
        ("items written", s.items),
        ("quarantined (lines and whole files)", s.quarantined),
        ("secrets redacted", sum(s.hits.values())),
    ]
    rows += [(f"  rule {rule}", n) for rule, n in sorted(s.hits.items())]
    return ("memkiln ingest", [(what, _fmt(v)) for what, v in rows])


def extract_section(s: ExtractSummary) -> Section:
    rows: list[tuple[str, float]] = [("sessions considered", s.considered)]
    rows += [(f"  {d}", n) for d, n in sorted(s.decisions.items(), key=lambda kv: -kv[1])]
    if s.orphans_taken_over:
        rows.append(("jobs taken over from a dead run", s.orphans_taken_over))
    # the outcomes count sessions, so they stand under the sessions, not under the requests
    rows.append(("sessions done", sum(s.outcomes.values())))
    rows += [(f"  {outcome}", n) for outcome, n in sorted(s.outcomes.items())]
    rows.append(("model requests", s.requests))
    if s.rate_limited:
        rows.append(("  refused for a rate limit, sent again", s.rate_limited))
    if s.batched or s.batches_open:  # openai-batch
        rows += [("  sent in a batch", s.batched), ("batches still running", s.batches_open)]
    if s.sessions_chunked or s.chunks_cut:  # sessions over the budget
        rows += [
            ("sessions in chunks", s.sessions_chunked),
            ("  chunk requests", s.chunk_requests),
            ("  merge requests", s.merge_requests),
            ("messages cut (one item over budget)", s.chunks_cut),
        ]
    rows += [("tokens in", s.input_tokens), ("tokens out", s.output_tokens)]
    cost = format_cost(s.cost_usd if s.price_known else None)
    shown = [(what, _fmt(v)) for what, v in rows] + [("cost (USD)", cost)]
    if s.budget_usd is not None:
        spent = s.spent_before_usd + s.cost_usd
        shown += [
            ("budget (USD)", format_cost(s.budget_usd)),
            ("  spent (with earlier phases)", format_cost(spent)),
            ("  reserved in flight, at most", format_cost(s.reserved_usd)),
            ("  left", format_cost(s.budget_usd - spent)),
        ]
    return ("memkiln extract", shown)


def consolidate_section(s: ConsolidateSummary) -> Section:
    statuses: dict[str, int] = {}
    for status in s.projects.values():
        statuses[status] = statuses.get(status, 0) + 1
    rows: list[tuple[str, float]] = [("projects", len(s.projects))]
    rows += [(f"  {status}", n) for status, n in sorted(statuses.items())]
    rows += [("files written", s.written), ("files removed", s.removed)]
    if s.dropped:
        rows.append(("lines dropped by the risk filter", sum(s.dropped.values())))
        rows += [(f"  {reason}", n) for reason, n in sorted(s.dropped.items())]
    shown = [(what, _fmt(v)) for what, v in rows]
    if s.requests:
        shown += [
            ("model requests", _fmt(s.requests)),
            ("tokens in", _fmt(s.input_tokens)),
            ("tokens out", _fmt(s.output_tokens)),
            ("cost (USD)", format_cost(s.cost_usd if s.price_known else None)),
        ]
    return ("memkiln consolidate", shown)


def notes(
    *, extract: ExtractSummary | None = None, consolidate: ConsolidateSummary | None = None
) -> list[str]:
    """What needs a person's attention: why a run stopped, which projects failed."""
    out = []
    if extract is not None and extract.stopped:
        out.append(f"extract stopped early: {extract.stopped}")
    if extract is not None and sessions_failed(extract):
        out.append(
            f"{sessions_failed(extract):,} session(s) failed; see "
            f"v_extraction_outcomes where run_id = '{extract.run_id}'"
        )
    if consolidate is not None:
        out += [f"project failed: {p}: {why}" for p, why in sorted(consolidate.failures.items())]
        if consolidate.stopped:
            out.append(f"consolidate stopped early: {consolidate.stopped}")
    return out


def sessions_failed(s: ExtractSummary) -> int:
    return sum(n for outcome, n in s.outcomes.items() if outcome.startswith("failed"))


def projects_failed(s: ConsolidateSummary) -> int:
    return max(s.projects_failed, len(s.failures))


def run_exit_code(
    *, extract: ExtractSummary | None = None, consolidate: ConsolidateSummary | None = None
) -> int:
    """The CLI's exit code for a run's summaries (see ``memkiln.transforms.report``)."""
    return exit_code(
        sessions_failed=sessions_failed(extract) if extract is not None else 0,
        projects_failed=projects_failed(consolidate) if consolidate is not None else 0,
    )


def _fmt(value: float | str) -> str:
    return value if isinstance(value, str) else number(value)
