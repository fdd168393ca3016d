"""The whole job, what a scheduler runs each night (``memkiln run``, ``memkiln serve``).

1. hold the store (one run per database at a time) and record the run
2. ingest (new and changed files only)
3. extract (eligible sessions whose stored output is not up to date); with ``--wait``
   (openai-batch), until every Batch API job has ended and been applied
4. consolidate (projects whose memories changed); a dry run estimates it instead
5. with the ``publish`` setting: place the memory where the agents named load it
6. close the run record with every phase's counters; report the summary

Each phase runs on the job's runner (``memkiln.pipeline.runner``): here, or under Prefect as
a task of the ``memkiln-run`` flow (``memkiln.flows.run``). Also here, what the jobs share:
the summary, the counters, a dry run's estimate. Nothing here imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from memkiln.constants import HEURISTIC_MODEL
from memkiln.errors import ConfigError
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook
from memkiln.io.progress import Reporter
from memkiln.io.run_records import recorded_parent_run
from memkiln.io.store import Counters, linked_runs, open_store
from memkiln.io.usage import consolidation_estimate, record_estimate
from memkiln.pipeline.consolidate import consolidate
from memkiln.pipeline.extract import extract
from memkiln.pipeline.ingest import check_archive, ingest
from memkiln.pipeline.publish import publish
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.pipeline.waiting import until_applied
from memkiln.settings import Settings
from memkiln.transforms.estimate import DEFAULT_STAGE_ONE_OUTPUT_TOKENS, Estimate
from memkiln.transforms.publish import PublishSummary, publish_section
from memkiln.transforms.report import Section
from memkiln.transforms.summaries import (
    ConsolidateSummary,
    ExtractSummary,
    IngestSummary,
    consolidate_section,
    extract_section,
    ingest_section,
)
from memkiln.transforms.summaries import notes as attention_notes

T = TypeVar("T")


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
    runner: Runner,
) -> Iterator[str]:
    """What a whole job (``run``, ``backfill``) holds while its phases run: the archive
    checked, the store held, a stop handled, and its own run recorded, whose id it yields.
    Each phase's run is linked to it, or, under Prefect, to the flow run."""
    if archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    shown = str(check_archive(archive).resolve())
    record = partial(recorded_parent_run, db, command=command, archive=shown, counts=counts)
    with hold_store(db), runner.guarded():
        flow_run_id = runner.flow_run_id()
        if flow_run_id is not None:
            with linked_runs(flow_run_id=flow_run_id), record() as run_id:
                yield run_id
        else:
            with record() as run_id, linked_runs(parent_run_id=run_id):
                yield run_id


def run_job(settings: Settings, runner: Runner | None = None) -> RunSummary:
    """``memkiln run``: ingest, extract, consolidate (then publish), each phase on ``runner``."""
    runner = runner or LocalRunner()
    reporter = Reporter(enabled=settings.progress)
    # 1. hold the store and record the run
    summary = RunSummary()
    with whole_job(
        settings.db, settings.archive, command="run", counts=summary.counters, runner=runner
    ) as summary.run_id:
        # 2.-4. the phases, each recorded as a run whose parent is this one
        phase = Phases(runner, settings, parent_run_id=summary.run_id, reporter=reporter)
        summary.ingest = phase(ingest)
        runner.log_phase(ingest_section(summary.ingest))
        summary.extract = until_applied(lambda spent: phase(extract, spent_before=spent), settings)
        runner.log_phase(extract_section(summary.extract))
        if settings.dry_run:  # no phase 2 files; its requests are estimated instead
            summary.estimate = dry_run_estimate(settings, summary.extract, run_id=summary.run_id)
        else:
            summary.consolidate = phase(consolidate, spent_before=spent(summary.extract))
            runner.log_phase(consolidate_section(summary.consolidate))
            # 5. the agents' read paths
            if settings.publish:
                summary.publish = phase(publish)
    # 6. report the summary
    runner.report("memkiln run", *run_report(summary))
    return summary


class Phases:
    """``runner.phase(p, settings, …)`` with the job's settings, parent run and reporter."""

    def __init__(
        self, runner: Runner, settings: Settings, *, parent_run_id: str, reporter: Reporter
    ) -> None:
        self.runner, self.settings = runner, settings
        self.parent_run_id, self.reporter = parent_run_id, reporter

    def __call__(self, phase: Callable[..., T], **kwargs: Any) -> T:
        return self.runner.phase(
            phase,
            self.settings,
            parent_run_id=self.parent_run_id,
            reporter=self.reporter,
            **kwargs,
        )


def run_report(summary: RunSummary) -> tuple[list[Section], list[str]]:
    """A run's summary: its sections and the lines that need attention."""
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    attention = attention_notes(extract=summary.extract, consolidate=summary.consolidate)
    if summary.publish is not None:
        sections.append(publish_section(summary.publish))
        attention = [*attention, *summary.publish.lines]
    return sections, attention
