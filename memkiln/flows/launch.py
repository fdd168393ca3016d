"""The runner a command gives a job: this process (``--no-prefect``), or Prefect, started
here. Nothing is imported from Prefect until a job runs under it, so that ``--no-prefect``
and every command's checks start without it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memkiln.errors import MemkilnError
from memkiln.io.progress import Reporter
from memkiln.pipeline.runner import LocalRunner, Runner
from memkiln.settings import Options, Settings

if TYPE_CHECKING:
    from memkiln.flows.tasks import PrefectRunner

T = TypeVar("T")
F = TypeVar("F")

#: The line a terminal shows while Prefect starts (the flow's first line replaces it).
PREFECT_STARTING = (
    "starting Prefect (its API server and database take a few seconds; "
    "--no-prefect runs without it)"
)


def runner_for(settings: Settings, *, prefect: bool, reporter: Reporter) -> Runner:
    """The runner of a command's job (the caller holds the store): this process, or, with
    ``prefect``, Prefect with the temporary API server prepared when no ``PREFECT_API_URL``
    names one."""
    if not prefect:
        return LocalRunner()
    reporter.waiting(PREFECT_STARTING)
    if not os.environ.get("PREFECT_API_URL"):
        from memkiln.io.signals import starting

        starting("Prefect was starting (its temporary API server)")
    prefect_environment()
    return flow_launcher(settings)


def flow_launcher(settings: Settings) -> PrefectRunner:
    """A runner whose ``job`` starts the recipe's flow on the task runner the settings name."""
    from memkiln.flows.tasks import PrefectRunner

    class FlowLauncher(PrefectRunner):
        def job(self, recipe: Callable[..., T], settings: Settings, *args: Any) -> T:
            flow: Callable[..., T] = on_task_runner(flow_of(recipe), settings)
            return flow(options_of(settings), *args)

    return FlowLauncher()


def flow_of(recipe: Callable[..., Any]) -> Any:
    """The Prefect flow of a job's recipe (``memkiln.pipeline``)."""
    from memkiln.flows.backfill import backfill_flow
    from memkiln.flows.consolidate import consolidate_flow
    from memkiln.flows.extract import extract_flow
    from memkiln.flows.ingest import ingest_flow
    from memkiln.flows.run import run_flow
    from memkiln.pipeline.backfill import backfill_job
    from memkiln.pipeline.consolidate import consolidate_job
    from memkiln.pipeline.extract import extract_job
    from memkiln.pipeline.ingest import ingest_job
    from memkiln.pipeline.run import run_job

    flows: dict[Callable[..., Any], Any] = {
        ingest_job: ingest_flow,
        extract_job: extract_flow,
        consolidate_job: consolidate_flow,
        run_job: run_flow,
        backfill_job: backfill_flow,
    }
    return flows[recipe]


def options_of(settings: Settings) -> Options:
    """The flows' parameter: the settings as a plain model."""
    return Options(**dict(settings))


def on_task_runner(flow: F, settings: Settings) -> F:
    """``flow`` on the task runner the settings name (see ``memkiln.flows.task_runners``)."""
    from memkiln.flows.task_runners import with_task_runner

    return with_task_runner(flow, kind=settings.task_runner, address=settings.dask_address)


def prefect_environment() -> None:
    """Make sure Prefect's home exists (Prefect creates it without parents, and fails), and
    that a temporary API server this run starts ends with it, even when it is killed."""
    if not os.environ.get("PREFECT_API_URL"):
        from memkiln.flows.server_watch import watch_ephemeral_server

        watch_ephemeral_server()
    try:
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemkilnError(
            f"cannot create Prefect's home {os.environ['PREFECT_HOME']}: {exc.strerror}; "
            "set PREFECT_HOME or MEMKILN_HOME to a writable directory"
        ) from exc
