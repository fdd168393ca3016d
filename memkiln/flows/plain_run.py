"""The whole job in this process alone, without Prefect (``memkiln run --no-prefect``):
the recipe of ``memkiln.flows.run``, whose flow runs the same phases as tasks, and what both
share (the summary, the counters, a dry run's estimate). Nothing here imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from memkiln.errors import ConfigError
from memkiln.flows.ephemeral import stoppable
from memkiln.flows.plain_consolidate import consolidate_store
from memkiln.flows.plain_extract import extract_store
from memkiln.flows.plain_ingest import check_archive, ingest_archive
from memkiln.flows.plain_publish import publish_store
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook
from memkiln.io.progress import Reporter
from memkiln.io.store import Counters, linked_runs, open_store, recorded_parent_run
from memkiln.io.usage import consolidation_estimate, record_estimate
from memkiln.llm.backends import HEURISTIC_MODEL
from memkiln.settings import Settings
from memkiln.transforms.estimate import DEFAULT_STAGE_ONE_OUTPUT_TOKENS, Estimate
from memkiln.transforms.publish import PublishSummary
from memkiln.transforms.summaries import ConsolidateSummary, ExtractSummary, IngestSummary


@dataclass
class RunSummary:
    run_id: str = ""
    ingest: IngestSummary = field(default_factory=IngestSummary)
    extract: ExtractSummary = field(default_factory=ExtractSummary)
    consolidate: ConsolidateSummary = field(default_factory=ConsolidateSummary)

    #: a dry run's counts and estimate, both phases (no model was called)
    estimate: Estimate | None = None
    #: the last phase with the ``publish`` setting: what was placed where each agent loads
    #: it (its counters stay in its own phase's run record)
    publish: PublishSummary | None = None

    def counters(self) -> dict[str, float | None]:
        """Every phase's counters; the model's requests, tokens and cost of both phases
        are added up."""
        return merge_counters(
            self.ingest.counters(), self.extract.counters(), self.consolidate.counters()
        )


def merge_counters(*phases: Counters) -> dict[str, float | None]:
    """Counters of several phases or batches as one run's: the model's requests, tokens and
    cost are summed (a cost is unknown, None, when any part is), the rest taken from the
    last phase that has them."""
    merged: dict[str, float | None] = {}
    for counters in phases:
        for name, value in counters.items():
            if name in SUMMED and name in merged:
                before = merged[name]
                merged[name] = None if before is None or value is None else before + value
            else:
                merged[name] = value
    return merged


#: Counters that add up over the phases of a run (the model's usage, sessions, files).
SUMMED = frozenset(
    (
        "model_requests",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "sessions_considered",
        "sessions_succeeded",
        "sessions_no_output",
        "sessions_failed",
        "sessions_reused",
    )
)


def spent(summary: ExtractSummary) -> float:
    """What a phase spent, counted against the budget (unknown prices count nothing: a
    budget is refused for a model without a price)."""
    return summary.cost_usd


def dry_run_estimate(settings: Settings, extract: ExtractSummary, *, run_id: str) -> Estimate:
    """A dry run's estimate of both phases (phase 2: the projects that get new memories),
    stored under ``run_id``."""
    estimate = extract.estimate or Estimate()
    model = HEURISTIC_MODEL if settings.backend == "heuristic" else settings.model
    basis = estimate.output_basis.get("extract")  # a memory: about one stage-one answer
    per_memory = DEFAULT_STAGE_ONE_OUTPUT_TOKENS if basis is None else basis.per_request
    con = open_store(settings.db)
    try:
        consolidation_estimate(
            con,
            estimate,
            backend=settings.backend,
            model=model,
            memory_tokens=per_memory,
            max_memories=settings.max_memories_per_project,
            context_window=settings.context_window,
            prices=PriceBook(settings.prices),
        )
        # the extract run stored its own phase's usage rows
        record_estimate(con, run_id=run_id, estimate=estimate, phases=("consolidate",))
    finally:
        con.close()
    return estimate


@contextmanager
def whole_job(
    db: Path,
    archive: Path | None,
    *,
    command: str,
    counts: Callable[[], Counters],
    flow_run_id: str | None = None,
) -> Iterator[str]:
    """What a whole job (``run``, ``backfill``) holds while its phases run: the archive
    checked, the store held, a stop handled, and its own run recorded, whose id it yields.
    Each phase's run is linked to it, or, under Prefect, to the flow run (``flow_run_id``)."""
    if archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    shown = str(check_archive(archive).resolve())
    record = partial(recorded_parent_run, db, command=command, archive=shown, counts=counts)
    with hold_store(db), stoppable():
        if flow_run_id is not None:
            with linked_runs(flow_run_id=flow_run_id), record() as run_id:
                yield run_id
        else:
            with record() as run_id, linked_runs(parent_run_id=run_id):
                yield run_id


def run_job(settings: Settings) -> RunSummary:
    """The recipe of ``run_flow`` in this process alone, without Prefect (``--no-prefect``)."""
    reporter = Reporter(enabled=settings.progress)
    summary = RunSummary()
    with whole_job(
        settings.db, settings.archive, command="run", counts=summary.counters
    ) as summary.run_id:
        summary.ingest = ingest_archive(settings, reporter=reporter)
        summary.extract = extract_store(settings, reporter=reporter)
        if settings.dry_run:  # no phase 2 files; its requests are estimated instead
            summary.estimate = dry_run_estimate(settings, summary.extract, run_id=summary.run_id)
        else:
            used = spent(summary.extract)
            summary.consolidate = consolidate_store(settings, reporter=reporter, spent_before=used)
            if settings.publish:
                summary.publish = publish_store(settings, targets=settings.publish)
    return summary
