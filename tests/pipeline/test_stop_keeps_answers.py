"""A run that stops (a signal, or an error in its rendering) keeps the outcomes that had
already arrived: they are written before the run hands its jobs back, instead of being
dropped from the write buffer and asked for again (a model's answers are paid for)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from memkiln.io.rules import load_rules
from memkiln.llm.backends import HeuristicBackend
from memkiln.llm.units import Group, Local, Ready
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.builders import make_archive


class StopsAtSecondChunk(Local):
    """The run's own work in process, with a stop (Ctrl-C) while the second chunk of
    sessions is prepared, once the first chunk's outcomes have arrived."""

    def __init__(self, settings: Settings) -> None:
        rules = load_rules()
        super().__init__(HeuristicBackend(rules=rules), settings=settings, rules=rules)
        self.rendered = 0

    def render(self, group: Group) -> list[Ready]:
        self.rendered += 1
        if self.rendered == 2:
            raise KeyboardInterrupt
        return super().render(group)


def test_outcomes_that_arrived_before_a_stop_are_written_and_the_rest_handed_back(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 20)
    settings = Settings(
        archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
        min_rollout_idle_hours=0, progress=False, concurrency=4,
    )  # type: ignore[call-arg]  # fmt: skip
    ingest_archive(settings)
    dispatch = StopsAtSecondChunk(settings)
    with pytest.raises(KeyboardInterrupt):
        extract_store(settings, dispatch=dispatch)
    assert dispatch.rendered == 2
    with duckdb.connect(str(settings.db), read_only=True) as con:
        jobs = dict(con.execute("select status, count(*) from stage1_jobs group by all").fetchall())
        attempts = con.execute("select outcome, count(*) from stage1_attempts group by all")
        outcomes = dict(attempts.fetchall())
        run = con.execute("select status from runs where command = 'extract'").fetchall()
    # the first chunk (--concurrency sessions) was extracted: all four outcomes are kept
    assert outcomes == {"succeeded": 4}
    assert jobs == {"succeeded": 4, "pending": 16}
    assert run == [("interrupted",)]
