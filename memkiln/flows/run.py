"""The whole job as the flow a scheduler runs each night (``memkiln run``, ``memkiln serve``):
the recipe of ``memkiln.pipeline.run`` on ``PrefectRunner``, each phase a task."""

# No ``from __future__ import annotations`` in the flow modules: a served or deployed flow
# run starts in a spawned process that gets the flow function cloudpickled by value, with
# only the globals its body uses, so a parameter annotated with the string "Options" could
# not be resolved there to validate the parameters.
from datetime import UTC, datetime

from prefect import flow

from memkiln.flows.run_logs import quiet_completed_tasks, quiet_keepalive_tracebacks
from memkiln.flows.tasks import PrefectRunner
from memkiln.pipeline.run import RunSummary, run_job
from memkiln.settings import Options, Settings


def _run_name() -> str:
    return datetime.now(UTC).strftime("run-%Y-%m-%dT%H-%M-%SZ")


@flow(name="memkiln-run", flow_run_name=_run_name)
def run_flow(options: Options) -> RunSummary:
    """Ingest the archive, extract stage-one memories, consolidate per-project memory files."""
    quiet_completed_tasks()  # the phases' counts are logged instead
    quiet_keepalive_tracebacks()
    return run_job(Settings.from_options(options), PrefectRunner())
