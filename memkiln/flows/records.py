"""What a run leaves behind besides its tables: summary sections (printed by the CLI,
published by each flow run as a markdown artifact and through Prefect's run logger), the
links between memkiln's run records and Prefect's flow runs, and the exit code."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from memkiln.io.store import linked_runs
from memkiln.transforms.estimate import format_cost
from memkiln.transforms.report import Section, exit_code, markdown, number, plain_lines

if TYPE_CHECKING:
    from memkiln.flows.consolidate import ConsolidateSummary
    from memkiln.flows.extract import ExtractSummary
    from memkiln.flows.ingest import IngestSummary

#: Artifact key of every memkiln flow run's summary (Prefect keeps the history per key).
ARTIFACT_KEY = "memkiln-summary"


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
    rows.append(("model requests", s.requests))
    if s.batched or s.batches_open:  # openai-batch
        rows += [("  sent in a batch", s.batched), ("batches still running", s.batches_open)]
    rows += [(f"  {outcome}", n) for outcome, n in sorted(s.outcomes.items())]
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
    return ("memkiln extract", shown)


def consolidate_section(s: ConsolidateSummary) -> Section:
    statuses: dict[str, int] = {}
    for status in s.projects.values():
        statuses[status] = statuses.get(status, 0) + 1
    rows: list[tuple[str, float]] = [("projects", len(s.projects))]
    rows += [(f"  {status}", n) for status, n in sorted(statuses.items())]
    rows += [("files written", s.written), ("files removed", s.removed)]
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


def flow_run_id() -> str | None:
    """The Prefect flow run this code runs in, if any."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    return str(run_id) if run_id else None


@contextmanager
def phase_of(parent_run_id: str | None) -> Iterator[None]:
    """Run records made in the block name their parent run and this Prefect flow run."""
    with linked_runs(parent_run_id=parent_run_id, flow_run_id=flow_run_id()):
        yield


def publish(title: str, sections: Sequence[Section], extra: Sequence[str] = ()) -> None:
    """Log the summary through Prefect's run logger and publish it as this flow run's
    markdown artifact (shown on the flow run's page in Prefect's UI)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    for line in plain_lines(sections):
        logger.info(line)
    for line in extra:
        logger.warning(line)
    create_markdown_artifact(
        markdown=markdown(title, sections, extra),
        key=ARTIFACT_KEY,
        description=f"{title}: counts per phase and outcome, tokens, cost, redactions",
    )
