"""Prefect's side of a run record: the flow run memkiln's run records link to, and the
summary each flow run publishes as a markdown artifact and through Prefect's run logger."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from memkiln.io.store import linked_runs
from memkiln.transforms.report import Section, markdown, plain_lines

#: Artifact key of every memkiln flow run's summary (Prefect keeps the history per key).
ARTIFACT_KEY = "memkiln-summary"


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
