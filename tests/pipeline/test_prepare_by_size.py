"""Extraction prepares its sessions in groups that hold at most ``GROUP_HELD_CHARS`` of kept
items together (a larger session a group of its own): what a prepared group holds, its
items and then its rendered requests, does not grow with its sessions' sizes, and every
session gets the request and outcome it gets in one group. A group is prepared only while
what the sessions being prepared and in flight hold stays within ``HELD_IN_FLIGHT_CHARS``."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import memkiln.llm.units as units
import memkiln.pipeline.extract_send as extract_send
import memkiln.pipeline.extract_steps as extract_steps
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.session_window import by_size
from tests.fake_openai import FakeOpenAI, last_user_text


def test_runs_keep_the_order_and_stay_under_the_bound() -> None:
    held = {"a": 40, "b": 50, "c": 30, "d": 500, "e": 10}
    assert by_size(list("abcde"), held, bound=100) == [
        ["a", "b"],
        ["c"],
        ["d"],  # larger than the bound alone: a run of its own
        ["e"],
    ]
    assert by_size(list("abcde"), held, bound=10_000) == [list("abcde")]
    # sessions without items a model may be shown hold nothing
    assert by_size(["p", "q"], {}, bound=1) == [["p", "q"]]


def _outputs(db: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "select rollout_id, raw_memory, rollout_summary from stage1_outputs order by 1"
        ).fetchall()


@pytest.mark.parametrize("backend", ["heuristic", "openai"])
def test_sessions_in_groups_by_size_get_the_same_requests_and_outputs(
    backend: str,
    sample_archive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_openai: FakeOpenAI,
) -> None:
    def run(name: str, bound: int | None) -> tuple[list[tuple[object, ...]], list[str], int, int]:
        if bound is not None:
            monkeypatch.setattr(extract_send, "GROUP_HELD_CHARS", bound)
        reads: list[int] = []
        real = extract_steps.read_sessions

        def counted(cur: duckdb.DuckDBPyConnection, todo: object, **kw: object) -> object:
            reads.append(todo.height)  # type: ignore[attr-defined]
            return real(cur, todo, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(extract_steps, "read_sessions", counted)
        settings = Settings(
            archive=sample_archive,
            db=tmp_path / f"{name}.duckdb",
            backend=backend,
            base_url=fake_openai.base_url,
            backfill=True,
            progress=False,
        )
        ingest_archive(settings)
        start = len(fake_openai.requests)
        taken = extract_store(settings).taken
        sent = sorted(last_user_text(r["body"]) for r in fake_openai.requests[start:])
        monkeypatch.undo()
        return _outputs(settings.db), sent, len(reads), taken

    whole, sent_whole, reads_whole, taken = run("whole", None)
    runs, sent_runs, reads_runs, _ = run("runs", 1)  # every session a group of its own
    assert reads_whole == 1 and reads_runs == taken > 1
    assert runs == whole
    assert sent_runs == sent_whole
    if backend == "openai":
        assert len(sent_whole) == taken


def test_a_group_is_prepared_only_once_the_requests_before_it_let_go_of_what_they_held(
    sample_archive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_openai: FakeOpenAI,
) -> None:
    """With a bound smaller than any session, each session is read only once no request is
    in flight (a chunked session's request holds its rendered items until it answers): six
    or seven 60 MiB sessions in flight together took a run to 1.8 GB."""
    monkeypatch.setattr(extract_send, "GROUP_HELD_CHARS", 1)  # a session a group
    monkeypatch.setattr(extract_send, "HELD_IN_FLIGHT_CHARS", 1)
    fake_openai.latency = 0.2  # answers come after the next group could have been read
    in_flight = [0]
    at_reads: list[int] = []
    real_read = extract_steps.read_sessions
    real_call = units.Local.call

    def counted(cur: duckdb.DuckDBPyConnection, todo: object, **kw: object) -> object:
        at_reads.append(in_flight[0])
        return real_read(cur, todo, **kw)  # type: ignore[arg-type]

    async def call(self: units.Local, request: object) -> object:
        in_flight[0] += 1
        try:
            return await real_call(self, request)  # type: ignore[arg-type]
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(extract_steps, "read_sessions", counted)
    monkeypatch.setattr(units.Local, "call", call)
    settings = Settings(
        archive=sample_archive,
        db=tmp_path / "held.duckdb",
        backend="openai",
        base_url=fake_openai.base_url,
        backfill=True,
        progress=False,
        concurrency=8,
    )
    ingest_archive(settings)
    summary = extract_store(settings)
    assert summary.taken > 2 and len(at_reads) == summary.taken
    assert at_reads == [0] * summary.taken
    assert summary.outcomes == {"succeeded": summary.taken}
