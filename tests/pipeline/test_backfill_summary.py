"""The summary 'memkiln backfill' prints adds up its extraction rounds whole: the sessions
sent in chunks, their chunk and merge requests and the messages cut count as they do in
'memkiln extract' (the README's "messages cut" line)."""

from __future__ import annotations

from memkiln.pipeline.backfill import BackfillSummary
from memkiln.transforms.summaries import ExtractSummary, extract_section


def batch(n: int) -> ExtractSummary:
    s = ExtractSummary(run_id=f"run{n}", taken=3, requests=7)
    s.sessions_chunked, s.chunk_requests, s.merge_requests, s.chunks_cut = 1, 4, 1, n
    return s


def test_the_batches_requests_add_up() -> None:
    total = BackfillSummary(rounds=[batch(1), batch(2)]).extract
    assert (total.taken, total.requests) == (6, 14)


def test_the_batches_chunked_sessions_and_messages_cut_add_up_and_are_shown() -> None:
    total = BackfillSummary(rounds=[batch(1), batch(2)]).extract
    counts = (total.sessions_chunked, total.chunk_requests, total.merge_requests, total.chunks_cut)
    assert counts == (2, 8, 2, 3)
    shown = dict(extract_section(total)[1])
    assert shown["sessions in chunks"] == "2"
    assert shown["messages cut (one item over budget)"] == "3"


def test_the_sessions_outcomes_stand_under_the_sessions_done_not_under_the_requests() -> None:
    summary = ExtractSummary(considered=5, requests=9, outcomes={"succeeded": 3, "failed": 1})
    rows = [what for what, _ in extract_section(summary)[1]]
    done = rows.index("sessions done")
    assert rows[done + 1 : done + 3] == ["  failed", "  succeeded"]
    assert rows.index("model requests") > done + 2
    assert dict(extract_section(summary)[1])["sessions done"] == "4"
