"""A stop request that surfaces inside a request's task stops the run.

SIGTERM raises ``Interrupted`` wherever the main thread is: often in the event loop's wait,
but also in the step of a request's asyncio task (with ``--task-runner dask``, submitting a
``call-model`` task serializes its options in that step), where asyncio keeps the exception
in the task, and pydantic wraps it when it lands inside a serializer. Seen by hand: a run
SIGTERM'd that way went on to the end, exit 1, the session failed as ``internal_error:
PydanticSerializationError: ... Interrupted: interrupted by SIGTERM``."""

from __future__ import annotations

import signal
from pathlib import Path

import duckdb
import pytest

from memkiln.errors import Interrupted
from memkiln.io.rules import load_rules
from memkiln.io.store import open_store
from memkiln.llm.backends import Request
from memkiln.llm.requests import build_requests
from memkiln.llm.units import (
    Local,
    call_wire,
    close_kept_backends,
    outcome_from_wire,
    request_to_wire,
    stop_calls,
)
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.states import Outcome, OutcomeKind
from tests.builders import make_archive
from tests.fake_openai import FakeOpenAI


class Answers:
    """A model backend that answers "nothing durable" at once."""

    name = "fake"
    model = "fake-model"

    async def extract(self, request: Request) -> Outcome:
        return Outcome(
            request.rollout_id,
            OutcomeKind.SUCCEEDED_NO_OUTPUT,
            input_hash=request.input_hash,
            sent=True,
        )

    async def aclose(self) -> None:
        return None


class StopInThirdCall(Local):
    """The run's work in process; the third call is where the stop request lands."""

    def __init__(self, settings: Settings, stop: BaseException) -> None:
        super().__init__(Answers(), settings=settings, rules=load_rules())
        self.stop_with = stop
        self.calls = 0

    async def call(self, request: Request) -> Outcome:
        self.calls += 1
        if self.calls == 3:
            raise self.stop_with
        return await super().call(request)


def wrapped() -> BaseException:
    """An error a serializer raised because the stop request landed inside it."""
    try:
        raise Interrupted(signal.SIGTERM, "SIGTERM")
    except Interrupted as stop:
        error = ValueError("Error calling function `_ser_model`: Interrupted")
        error.__cause__ = stop
        return error


@pytest.mark.parametrize(
    "stop", [Interrupted(signal.SIGTERM, "SIGTERM"), wrapped()], ids=["itself", "wrapped"]
)
def test_a_stop_in_a_requests_task_stops_the_run_at_once(
    stop: BaseException, tmp_path: Path
) -> None:
    make_archive(tmp_path / "archive", 12)
    settings = Settings(
        archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
        min_rollout_idle_hours=0, progress=False, concurrency=1,
    )  # type: ignore[call-arg]  # fmt: skip
    ingest_archive(settings)
    dispatch = StopInThirdCall(settings, stop)
    with pytest.raises(Interrupted):
        extract_store(settings, backend=Answers(), dispatch=dispatch)  # type: ignore[arg-type]
    assert dispatch.calls == 3  # nothing sent after the stop
    with duckdb.connect(str(settings.db), read_only=True) as con:
        reasons = con.execute("select reason from stage1_attempts").fetchall()
        jobs = dict(con.execute("select status, count(*) from stage1_jobs group by all").fetchall())
        run = con.execute("select status from runs where command = 'extract'").fetchall()
    assert ("internal_error",) not in reasons
    assert run == [("interrupted",)]
    assert "running" not in jobs
    assert sum(jobs.values()) == 12


def test_a_worker_that_served_a_stopped_run_serves_the_next_run_with_the_same_options(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A long-lived Dask worker keeps what a stop told it; a later run of the same
    settings (the next night's) must still get its answers."""
    make_archive(tmp_path / "archive", 1)
    settings = Settings(
        archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
        min_rollout_idle_hours=0, progress=False, backend="openai",
        base_url=fake_openai.base_url, model="gpt-4.1-mini", max_retries=0,
    )  # type: ignore[call-arg]  # fmt: skip
    ingest_archive(settings)
    con = open_store(settings.db)
    try:
        todo = con.sql("select rollout_id from rollouts").pl()
        (request,) = build_requests(con, todo, settings=settings, rules=load_rules())
    finally:
        con.close()
    wire = request_to_wire(request)
    try:
        stop_calls("night-1")  # the stop of an earlier run, told to this worker
        stopped_call = outcome_from_wire(call_wire(wire | {"run": "night-1"}, settings))
        next_run = outcome_from_wire(call_wire(wire | {"run": "night-2"}, settings))
    finally:
        close_kept_backends()
    assert stopped_call.outcome == "failed" and fake_openai.count() == 1
    assert next_run.outcome == "succeeded" and next_run.output is not None
