"""The runner of a job inside a Prefect flow run: each phase a task, each store-free step a
task on the flow's task runner (threads, or Dask workers: ``memkiln.flows.task_runners``).

The recipes are in ``memkiln.pipeline``; here only where their parts run. A phase task turns
the flow's parameter back into ``Settings`` (``Settings.from_options``: validated once, by
the command that started the flow) and links the run records it makes to the job's run and
to the flow run (``phase_of``).
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

from prefect import task
from prefect.cache_policies import NO_CACHE

from memkiln.flows.artifacts import flow_run_id, phase_of, publish
from memkiln.flows.dispatch import Tasks
from memkiln.flows.ephemeral import stoppable
from memkiln.flows.run_logs import log_phase
from memkiln.flows.task_runners import current_runner, parallelism, stopped_with, submit_step
from memkiln.io.progress import Reporter
from memkiln.llm.units import Dispatch
from memkiln.pipeline.consolidate import consolidate, render_step
from memkiln.pipeline.extract import extract
from memkiln.pipeline.ingest import ingest, prepare_step
from memkiln.pipeline.publish import publish as publish_phase
from memkiln.pipeline.runner import ordered_results
from memkiln.settings import Options, Settings
from memkiln.transforms.publish import PublishSummary
from memkiln.transforms.report import Section
from memkiln.transforms.summaries import ConsolidateSummary, ExtractSummary, IngestSummary

T = TypeVar("T")


class PrefectRunner:
    """A job's runner inside its flow run: phases and steps as tasks, the summary as the
    flow run's log and artifact."""

    spreads = True

    def job(self, recipe: Callable[..., T], settings: Settings, *args: Any) -> T:
        return recipe(settings, self, *args)

    def phase(
        self,
        phase: Callable[..., T],
        settings: Settings,
        *,
        parent_run_id: str | None,
        reporter: Reporter,
        **kwargs: Any,
    ) -> T:
        # the task makes its own reporter (the same settings)
        return cast(T, PHASE_TASKS[phase](settings, parent_run_id=parent_run_id, **kwargs))

    def map(self, step: Callable[..., T], items: Iterable[tuple[Any, ...]]) -> Iterator[T]:
        it = iter(items)
        first = next(it, None)
        if first is None:  # nothing to do starts nothing (no local cluster)
            return
        runner = current_runner()
        ahead = parallelism(runner)
        step_task = STEP_TASKS[step]
        with stopped_with(runner):
            yield from ordered_results(
                lambda item: submit_step(step_task, *item), _chain(first, it), ahead=ahead
            )

    def dispatch(self, settings: Settings) -> Dispatch | None:
        return Tasks(settings)

    def guarded(self) -> AbstractContextManager[None]:
        return stoppable()

    def flow_run_id(self) -> str | None:
        return flow_run_id()

    def log_phase(self, section: Section) -> None:
        log_phase(section)

    def report(self, title: str, sections: Sequence[Section], notes: Sequence[str]) -> None:
        publish(title, sections, notes)


def _chain(first: T, rest: Iterator[T]) -> Iterator[T]:
    yield first
    yield from rest


def _phase(phase: Callable[..., T], options: Options, parent_run_id: str | None, **kw: Any) -> T:
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        reporter = Reporter(enabled=options.progress)
        return phase(settings, runner=PrefectRunner(), reporter=reporter, **kw)


@task(
    name="ingest-archive",
    task_run_name="ingest the archive",
    cache_policy=NO_CACHE,
    log_prints=False,
)
def ingest_task(options: Options, parent_run_id: str | None = None) -> IngestSummary:
    """Read new and changed files of the archive into the store."""
    return _phase(ingest, options, parent_run_id)


@task(
    name="extract-sessions", task_run_name="extract with {options.backend}", cache_policy=NO_CACHE
)
def extract_task(
    options: Options, parent_run_id: str | None = None, spent_before: float = 0.0
) -> ExtractSummary:
    """Stage one over the eligible sessions whose output is not up to date."""
    return _phase(extract, options, parent_run_id, spent_before=spent_before)


@task(name="consolidate-projects", task_run_name="consolidate the projects", cache_policy=NO_CACHE)
def consolidate_task(
    options: Options,
    project: str | None = None,
    parent_run_id: str | None = None,
    spent_before: float = 0.0,
) -> ConsolidateSummary:
    """Write the memory files of every project whose memories changed."""
    return _phase(consolidate, options, parent_run_id, project=project, spent_before=spent_before)


@task(name="publish", task_run_name="publish to the agents", cache_policy=NO_CACHE)
def publish_task(options: Options, parent_run_id: str | None = None) -> PublishSummary:
    """Place each project's memory where the agents named by the ``publish`` setting load it."""
    return _phase(publish_phase, options, parent_run_id)


#: The task of each phase of ``memkiln.pipeline``.
PHASE_TASKS: dict[Callable[..., Any], Any] = {
    ingest: ingest_task,
    extract: extract_task,
    consolidate: consolidate_task,
    publish_phase: publish_task,
}


@task(
    name="prepare-batch",
    task_run_name="prepare batch {index}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def prepare_task(batch_ipc: bytes, index: int) -> dict[str, object]:
    """Read, split, redact, parse and normalize one ingest batch of files; Arrow IPC out."""
    return prepare_step(batch_ipc, index)


@task(
    name="render-project",
    task_run_name="render {project_key}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def render_task(project_key: str, selected_ipc: bytes) -> dict[str, str]:
    """A project's memory files under the heuristic backend (pure work; written by the
    flow's process)."""
    return render_step(project_key, selected_ipc)


#: The task of each step a phase maps (``Runner.map``).
STEP_TASKS: dict[Callable[..., Any], Any] = {prepare_step: prepare_task, render_step: render_task}
