"""Extraction's store-free work as units that cross processes (``memkiln.llm.units``): what
goes over the wire comes back the same, and a run whose rendering and model calls go over
the wire (pickled, as Dask sends them) writes exactly the rows of a run that keeps them in
its process, with the budget and the failures in a row still decided by the flow."""

from __future__ import annotations

import asyncio
import json
import pickle
import shutil
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import duckdb
import pytest

from memkiln.flows.dispatch import Tasks
from memkiln.flows.extract import extract_flow
from memkiln.io.rules import load_rules
from memkiln.io.store import open_store
from memkiln.llm.backends import Request
from memkiln.llm.ratelimit import HOLD
from memkiln.llm.requests import build_requests
from memkiln.llm.units import (
    Group,
    Ready,
    call_wire,
    close_kept_backends,
    group_to_wire,
    outcome_from_wire,
    outcome_to_wire,
    ready_from_wire,
    render_wire,
    request_from_wire,
    request_to_wire,
)
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Options, Settings
from memkiln.transforms.states import Outcome
from tests.builders import make_archive
from tests.fake_openai import FakeOpenAI
from tests.flows.test_dask_runner import table_rows
from tests.pipeline.test_extract_chunks import long_session


def across(value: Any) -> Any:
    """``value`` as another process gets it (pickled, as Dask sends it)."""
    return pickle.loads(pickle.dumps(value))


class Wire:
    """The task bodies run in this process, every input and result sent over the wire:
    what ``Tasks`` does without Prefect (two chunks rendered ahead)."""

    ahead = 2

    def __init__(self, options: Options) -> None:
        self.options = options
        self.rendered = self.called = 0

    def render(self, group: Group) -> list[Ready]:
        self.rendered += 1
        wires = render_wire(across(group_to_wire(group)), across(self.options))
        return [ready_from_wire(w) for w in across(wires)]

    async def call(self, request: Request) -> Outcome:
        self.called += 1
        wire = request_to_wire(request) | {"hold": HOLD.get()}
        result = await asyncio.to_thread(call_wire, across(wire), across(self.options))
        return outcome_from_wire(json.loads(json.dumps(result)))

    def running(self) -> AbstractContextManager[None]:
        return nullcontext()

    def close(self) -> None:
        close_kept_backends()


def settings(tmp_path: Path, db: str, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / db,
        "backfill": True,
        "min_rollout_idle_hours": 0,
        "progress": False,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def two_stores(tmp_path: Path, **kw: object) -> tuple[Settings, Settings]:
    """The same ingested store twice: one run in process, one over the wire."""
    local = settings(tmp_path, "local.duckdb", **kw)
    ingest_archive(local)
    shutil.copy(local.db, tmp_path / "wire.duckdb")
    return local, settings(tmp_path, "wire.duckdb", **kw)


def model(fake: FakeOpenAI, **kw: object) -> dict[str, object]:
    return {
        "backend": "openai",
        "base_url": fake.base_url,
        "model": "gpt-4.1-mini",
        "max_retries": 0,
        "request_timeout_s": 20,
    } | kw


def test_a_request_and_its_outcome_come_back_the_same_over_the_wire(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    long_session(tmp_path / "archive", megabytes=0.6, turns=6, n=99)
    make_archive(tmp_path / "archive", 3)
    s = settings(tmp_path, "m.duckdb", **model(fake_openai, context_window=60_000))
    ingest_archive(s)
    con = open_store(s.db)
    try:
        todo = con.sql("select rollout_id from rollouts order by rollout_id").pl()
        requests = build_requests(con, todo, settings=s, rules=load_rules(), chunked=True)
    finally:
        con.close()
    assert len(requests) == 4 and sum(bool(r.parts) for r in requests) == 1
    for request in requests:
        wire = request_to_wire(request)
        if request.parts:  # the texts the thread runner shares, not a copy
            assert wire["parts"]["texts"].frame.to_series().equals(request.parts.texts)
        back = request_from_wire(across(wire))
        assert back.items.is_empty()  # a model reads only the messages
        for field in ("rollout_id", "input_hash", "chunks", "header", "facts"):
            assert getattr(back, field) == getattr(request, field), field
        for mine, theirs in zip(
            (request.prompt, *request.parts), (back.prompt, *back.parts), strict=True
        ):
            assert (theirs.system, theirs.user, theirs.frame) == (
                mine.system,
                mine.user,
                mine.frame,
            )
            assert theirs.truncation.truncated == mine.truncation.truncated
            assert theirs.user_tokens == mine.user_tokens
        assert (back.parts.input_tokens, back.parts.cut) == (
            request.parts.input_tokens,
            request.parts.cut,
        )
        outcome = outcome_from_wire(call_wire(across(request_to_wire(request)), across(s)))
        assert outcome.outcome == "succeeded" and outcome.output is not None
        assert outcome_from_wire(json.loads(json.dumps(outcome_to_wire(outcome)))) == outcome
    close_kept_backends()


def test_the_heuristic_over_the_wire_writes_the_rows_of_a_run_in_process(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 90)  # chunks of 8, 64 and 18 sessions
    local, wired = two_stores(tmp_path)
    wire = Wire(wired)

    in_process = extract_store(local)
    over_wire = extract_store(wired, dispatch=wire)

    assert in_process.outcomes == over_wire.outcomes == {"succeeded": 90}
    assert wire.rendered == 3 and wire.called == 0  # the heuristic extracts where it renders
    mine, theirs = table_rows(local.db), table_rows(wired.db)
    assert mine["stage1_outputs"]
    for table, rows in mine.items():
        assert theirs[table] == rows, table


def test_a_model_run_over_the_wire_with_a_chunked_session_writes_the_same_rows(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    long_session(tmp_path / "archive", megabytes=0.6, turns=6, n=99)
    make_archive(tmp_path / "archive", 12)
    local, wired = two_stores(tmp_path, **model(fake_openai, context_window=60_000))
    wire = Wire(wired)

    in_process = extract_store(local)
    sent_in_process = fake_openai.count()
    over_wire = extract_store(wired, dispatch=wire)

    assert in_process.outcomes == over_wire.outcomes == {"succeeded": 13}
    assert in_process.sessions_chunked == over_wire.sessions_chunked == 1
    assert over_wire.requests == in_process.requests == sent_in_process > 13
    assert fake_openai.count() == 2 * sent_in_process  # each request sent once per run
    assert wire.called == 13  # a chunked session's chunks and merge are one call
    mine, theirs = table_rows(local.db), table_rows(wired.db)
    for table, rows in mine.items():
        assert theirs[table] == rows, table


def test_over_the_wire_the_flow_still_stops_on_failures_in_a_row_and_on_the_budget(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 40)
    closed = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    down = settings(tmp_path, "down.duckdb", **model(fake_openai, base_url=closed))
    ingest_archive(down)
    shutil.copy(down.db, tmp_path / "budget.duckdb")
    s = down.model_copy(update={"concurrency": 2, "request_timeout_s": 5})
    summary = extract_store(s, dispatch=Wire(s))
    failed = summary.outcomes.get("failed:connection_error", 0)
    assert summary.outcomes == {"failed:connection_error": failed}
    assert 8 <= failed < 40 and summary.stopped is not None
    assert "8 requests in a row failed with connection_error" in summary.stopped

    budget = 0.01  # a few requests' worth at gpt-4.1-mini's price
    b = settings(tmp_path, "budget.duckdb", **model(fake_openai, budget_usd=budget))
    summary = extract_store(b, dispatch=Wire(b))
    assert summary.budget_reached, summary
    assert 0 < summary.outcomes["succeeded"] < 40, summary.outcomes
    assert summary.cost_usd <= budget
    assert summary.requests == fake_openai.count() == summary.outcomes["succeeded"]
    with duckdb.connect(str(b.db), read_only=True) as con:
        jobs = dict(con.sql("select status, count(*) from stage1_jobs group by 1").fetchall())
    assert jobs == {"succeeded": summary.outcomes["succeeded"], "pending": 40 - jobs["succeeded"]}
    close_kept_backends()


@pytest.mark.timeout(300)
def test_under_prefect_each_request_is_a_call_model_task_and_the_rows_are_the_same(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, prefect_home: Path
) -> None:
    from prefect.settings import (
        PREFECT_HOME,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    long_session(tmp_path / "archive", megabytes=0.6, turns=6, n=99)
    make_archive(tmp_path / "archive", 6)
    local, flowed = two_stores(tmp_path, **model(fake_openai, context_window=60_000))
    extract_store(local)
    submitted: list[str] = []
    real = Tasks.call

    async def counted(self: Tasks, request: Request) -> Outcome:
        submitted.append(request.rollout_id)
        return await real(self, request)

    monkeypatch.setattr(Tasks, "call", counted)
    # no call task is kept by the phase once it ended (``submit_step``)
    from prefect.transactions import Transaction

    taken: list[object] = []
    add_child = Transaction.add_child
    monkeypatch.setattr(
        Transaction, "add_child", lambda self, child: (taken.append(child), add_child(self, child))
    )

    # Prefect read its settings when it was imported, before the test session set them
    with temporary_settings(
        {PREFECT_HOME: prefect_home, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 90}
    ):
        summary = extract_flow(Options(**dict(flowed)))

    assert summary.outcomes == {"succeeded": 7} and len(submitted) == 7
    assert taken == []
    mine, theirs = table_rows(local.db), table_rows(flowed.db)
    for table, rows in mine.items():
        assert theirs[table] == rows, table
