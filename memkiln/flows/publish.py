"""Publishing as a Prefect task: the last phase of ``memkiln run --publish`` (the recipe is
``memkiln.flows.plain_publish``)."""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
from prefect import task
from prefect.cache_policies import NO_CACHE

from memkiln.flows.plain_publish import publish_store
from memkiln.io.artifacts import phase_of
from memkiln.settings import Options, Settings
from memkiln.transforms.publish import PublishSummary


@task(name="publish", task_run_name="publish to the agents", cache_policy=NO_CACHE)
def publish_task(options: Options, parent_run_id: str | None = None) -> PublishSummary:
    """Place each project's memory where the agents named by the ``publish`` setting load it."""
    with phase_of(parent_run_id):
        return publish_store(Settings.from_options(options), targets=options.publish)
