"""The whole job, the flow a scheduler runs each night (``memkiln run``, ``memkiln serve``).

1. hold the store (one run per database at a time) and record the run
2. ingest (new and changed files only)
3. extract (eligible sessions whose stored output is not up to date)
4. consolidate (projects whose memories changed)
5. close the run record with every phase's counters; publish the summary
"""

# No ``from __future__ import annotations`` in the flow modules: a served or deployed flow
# run starts in a spawned process that gets the flow function cloudpickled by value, with
# only the globals its body uses, so a parameter annotated with the string "Options" could
# not be resolved there to validate the parameters.
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prefect import flow

from memkiln.errors import ConfigError
from memkiln.flows.consolidate import consolidate_store, consolidate_task
from memkiln.flows.ephemeral import stoppable
from memkiln.flows.extract import extract_store, extract_task
from memkiln.flows.ingest import check_archive, ingest_archive, ingest_task
from memkiln.io.artifacts import flow_run_id, publish
from memkiln.io.lock import hold_store
from memkiln.io.prices import PriceBook
from memkiln.io.progress import Reporter
from memkiln.io.store import Counters, linked_runs, open_store, recorded_parent_run
from memkiln.io.usage import consolidation_estimate, record_estimate
from memkiln.llm.backends import HEURISTIC_MODEL
from memkiln.settings import Options, Settings
from memkiln.transforms.estimate import DEFAULT_STAGE_ONE_OUTPUT_TOKENS, Estimate
from memkiln.transforms.summaries import (
    ConsolidateSummary,
    ExtractSummary,
    IngestSummary,
    consolidate_section,
    extract_section,
    ingest_section,
    notes,
)


@dataclass
class RunSummary:
    run_id: str = ""
    ingest: IngestSummary = field(default_factory=IngestSummary)
    extract: ExtractSummary = field(default_factory=ExtractSummary)
    consolidate: ConsolidateSummary = field(default_factory=ConsolidateSummary)

    #: a dry run's counts and estimate, both phases (no model was called)
    estimate: Estimate | None = None

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
    per_memory = DEFAULT_STAGE_ONE_OUTPUT_TOKENS
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


def _run_name() -> str:
    return datetime.now(UTC).strftime("run-%Y-%m-%dT%H-%M-%SZ")


@flow(name="memkiln-run", flow_run_name=_run_name)
def run_flow(options: Options) -> RunSummary:
    """Ingest the archive, extract stage-one memories, consolidate per-project memory files."""
    # 1. hold the store and record the run
    if options.archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    archive = str(check_archive(options.archive).resolve())
    summary = RunSummary()
    with (
        hold_store(options.db),
        stoppable(),
        linked_runs(flow_run_id=flow_run_id()),
        recorded_parent_run(
            options.db, command="run", archive=archive, counts=summary.counters
        ) as summary.run_id,
    ):
        # 2.-4. the phases, each recorded as a run whose parent is this one
        summary.ingest = ingest_task(options, summary.run_id)
        summary.extract = extract_task(options, summary.run_id)
        if options.dry_run:  # no phase 2 files; its requests are estimated instead
            settings = Settings.from_options(options)
            summary.estimate = dry_run_estimate(settings, summary.extract, run_id=summary.run_id)
        else:
            used = spent(summary.extract)
            summary.consolidate = consolidate_task(options, None, summary.run_id, used)
    # 5. publish
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    attention = notes(extract=summary.extract, consolidate=summary.consolidate)
    publish("memkiln run", sections, attention)
    return summary


def run_job(settings: Settings) -> RunSummary:
    """The same recipe in this process alone, without Prefect (``--no-prefect``)."""
    if settings.archive is None:
        raise ConfigError("no archive to ingest: set --archive, MEMKILN_ARCHIVE or archive")
    archive = str(check_archive(settings.archive).resolve())
    reporter = Reporter(enabled=settings.progress)
    summary = RunSummary()
    with (
        hold_store(settings.db),
        stoppable(),
        recorded_parent_run(
            settings.db, command="run", archive=archive, counts=summary.counters
        ) as summary.run_id,
        linked_runs(parent_run_id=summary.run_id),
    ):
        summary.ingest = ingest_archive(settings, reporter=reporter)
        summary.extract = extract_store(settings, reporter=reporter)
        if settings.dry_run:  # no phase 2 files; its requests are estimated instead
            summary.estimate = dry_run_estimate(settings, summary.extract, run_id=summary.run_id)
        else:
            used = spent(summary.extract)
            summary.consolidate = consolidate_store(settings, reporter=reporter, spent_before=used)
    return summary
