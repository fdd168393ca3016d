"""A backfill over years of history (``memkiln backfill``).

1. hold the store and record the run (command ``backfill``)
2. ingest the archive (new and changed files only)
3. extract every eligible session whose own dates fall in ``since``..``until`` (the nightly
   age window does not apply), in backfill rounds of ``max_rollouts_per_run`` sessions, each
   an extraction run of its own, until none is left, the budget is reached or a round stops
   early; with ``--wait`` (openai-batch), until every Batch API job has ended and been
   applied
4. consolidate (projects whose memories changed); a dry run estimates it instead
5. close the run record with the counters of every phase and round

Interrupted anywhere, the next invocation goes on: finished sessions are up to date, jobs
of the killed run are taken over, and a round takes only sessions not yet done. Each phase
runs on the job's runner (under Prefect, a task of the ``memkiln-backfill`` flow). Nothing
here imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from dataclasses import dataclass, field
from typing import TypeVar

from memkiln.io.progress import Reporter
from memkiln.pipeline.consolidate import consolidate
from memkiln.pipeline.extract import extract
from memkiln.pipeline.ingest import ingest
from memkiln.pipeline.run import Phases, dry_run_estimate, merge_counters, whole_job
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.pipeline.waiting import combined, wait_then_again
from memkiln.settings import Options, Settings
from memkiln.transforms.estimate import Estimate
from memkiln.transforms.report import Section
from memkiln.transforms.summaries import (
    ConsolidateSummary,
    ExtractSummary,
    IngestSummary,
    consolidate_section,
    extract_section,
    ingest_section,
    notes,
)

#: A dry run looks at every round at once: the per-run limit is lifted to this.
ALL_SESSIONS = 2**62


@dataclass
class BackfillSummary:
    run_id: str = ""
    ingest: IngestSummary = field(default_factory=IngestSummary)
    #: each round of extraction's summary, in order
    rounds: list[ExtractSummary] = field(default_factory=list)
    consolidate: ConsolidateSummary = field(default_factory=ConsolidateSummary)
    estimate: Estimate | None = None

    @property
    def extract(self) -> ExtractSummary:
        """The rounds as one extraction: counts added up, the last round's stop reason."""
        return combined(self.rounds)

    def counters(self) -> dict[str, float | None]:
        return merge_counters(
            self.ingest.counters(),
            *(one.counters() for one in self.rounds),
            self.consolidate.counters(),
        )


#: ``Options`` or its ``Settings`` subclass: a backfill's copy keeps the type it was given.
AnyOptions = TypeVar("AnyOptions", bound=Options)


def backfill_settings(settings: AnyOptions) -> AnyOptions:
    """The settings of a backfill: no age window; a dry run counts every round at once."""
    update: dict[str, object] = {"backfill": True}
    if settings.dry_run:
        update["max_rollouts_per_run"] = ALL_SESSIONS
    return settings.model_copy(update=update)


def more_to_do(extracted: ExtractSummary) -> bool:
    """Whether another round would find sessions this one left (the per-run limit)."""
    return (
        not extracted.stopped
        and extracted.estimate is None
        and extracted.taken > 0
        and extracted.decisions.get("over_run_limit", 0) > 0
    )


def backfill_job(settings: Settings, runner: Runner | None = None) -> BackfillSummary:
    """``memkiln backfill``: ingest, extraction rounds until none is left, consolidate; each
    phase on ``runner``."""
    runner = runner or LocalRunner()
    # 1. hold the store and record the run
    settings = backfill_settings(settings)
    reporter = Reporter(enabled=settings.progress)
    summary = BackfillSummary()
    with whole_job(
        settings.db, settings.archive, command="backfill", counts=summary.counters, runner=runner
    ) as summary.run_id:
        phase = Phases(runner, settings, parent_run_id=summary.run_id, reporter=reporter)
        # 2. ingest
        summary.ingest = phase(ingest)
        runner.log_phase(ingest_section(summary.ingest))
        # 3. extract in rounds
        spent = 0.0
        while True:
            extracted = phase(extract, spent_before=spent)
            runner.log_phase(extract_section(extracted))
            summary.rounds.append(extracted)
            spent += extracted.cost_usd
            if not more_to_do(extracted) and not wait_then_again(settings, extracted):
                break
        # 4. consolidate, or estimate it
        if settings.dry_run:
            summary.estimate = dry_run_estimate(settings, extracted, run_id=summary.run_id)
        else:
            summary.consolidate = phase(consolidate, spent_before=spent)
            runner.log_phase(consolidate_section(summary.consolidate))
    # 5. report the summary
    runner.report("memkiln backfill", *backfill_report(summary))
    return summary


def backfill_report(summary: BackfillSummary) -> tuple[list[Section], list[str]]:
    """A backfill's summary: its sections (the rounds as one extraction) and the lines that
    need attention."""
    extracted = summary.extract
    sections = [
        ingest_section(summary.ingest),
        extract_section(extracted),
        consolidate_section(summary.consolidate),
    ]
    return sections, notes(extract=extracted, consolidate=summary.consolidate)
