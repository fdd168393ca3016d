"""Sessions that fail while an openai-batch run submits (read in chunks, sent at once, and
refused) are counted as failed in the run's summary and its ``runs`` row, as the outcomes
say."""

from __future__ import annotations

from pathlib import Path

import duckdb

from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from tests.fake_openai import FakeOpenAI, Reply
from tests.pipeline.test_backfill_batch import batch_settings


def test_chunked_sessions_refused_during_submission_count_as_failed_sessions(
    tmp_path: Path, sample_archive: Path, fake_openai: FakeOpenAI
) -> None:
    # a window this small reads every session in chunks: chunks are sent at once, not batched,
    # and the server refuses every one of them
    fake_openai.route(lambda body: Reply(kind="status", status=400))
    s = batch_settings(tmp_path, sample_archive, fake_openai).model_copy(
        update={"context_window": 6_000, "max_output_tokens": 1_000, "backfill": True}
    )
    ingest_archive(s)
    summary = extract_store(s)
    failed = sum(n for kind, n in summary.outcomes.items() if kind.startswith("failed"))
    assert failed > 0 and summary.batched < 6, summary.outcomes
    assert summary.sessions_failed == failed
    with duckdb.connect(str(s.db), read_only=True) as con:
        stored = con.execute(
            "select sessions_failed from runs where command = 'extract'"
        ).fetchall()
        jobs = con.execute("select count(*) from stage1_jobs where status = 'failed'").fetchall()
    assert stored == [(failed,)]
    assert jobs == [(failed,)]
