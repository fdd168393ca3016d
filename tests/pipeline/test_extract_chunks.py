"""Sessions over the budget reach the model whole: extracted in chunks of turns, whose
partial memories one more request merges into the session's one stage-one output."""

from __future__ import annotations

import gc
import json
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from memkiln.io.prices import PriceBook
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.prompts import StageOneInput
from memkiln.transforms.summaries import extract_section
from tests.builders import ts, uid
from tests.fake_openai import FakeOpenAI, Reply, last_user_text

MARK = re.compile(r"MARK-\d+-\d+")


def long_session(archive: Path, *, megabytes: float, turns: int, n: int = 7) -> list[str]:
    """A Codex session of about ``megabytes`` in ``turns`` user turns, each with shell calls
    whose outputs carry markers, spread through its whole length; returns the markers."""
    at = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    meta = {"id": uid(n), "timestamp": ts(at), "cwd": "/home/dev/shop", "source": "cli",
            "originator": "codex-tui", "cli_version": "0.140.0"}  # fmt: skip
    lines: list[dict[str, Any]] = [{"timestamp": ts(at), "type": "session_meta", "payload": meta}]
    markers: list[str] = []
    per_turn = megabytes * 1_000_000 / turns
    size = 0

    def add(payload: dict[str, Any]) -> None:
        nonlocal size
        line = {"timestamp": ts(at + timedelta(seconds=len(lines))), "type": "response_item",
                "payload": payload}  # fmt: skip
        lines.append(line)
        size += len(json.dumps(line))

    for t in range(turns):
        text = f"Turn {t}: now run step {t} of the billing migration"
        add({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        k = 0
        while size < per_turn * (t + 1):
            marker = f"MARK-{t}-{k}"
            markers.append(marker)
            args = json.dumps({"command": ["bash", "-lc", f"make step-{t}-{k}"]})
            add({"type": "function_call", "name": "shell", "arguments": args, "call_id": f"c{t}-{k}"})  # fmt: skip
            output = f"{marker}\n" + "".join(f"[{t}:{k}:{j}] compiling module_{j}.py ok\n" for j in range(60))  # fmt: skip
            add({"type": "function_call_output", "call_id": f"c{t}-{k}", "output": output})
            k += 1
        answer = f"Step {t} is done."
        add({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]})  # fmt: skip
    day = archive / "sessions" / at.strftime("%Y/%m/%d")
    day.mkdir(parents=True, exist_ok=True)
    path = day / f"rollout-{at.strftime('%Y-%m-%dT%H-%M-%S')}-{uid(n)}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return markers


def settings(tmp_path: Path, fake: FakeOpenAI, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "backfill": True,
        "min_rollout_idle_hours": 0,
        "backend": "openai",
        "base_url": fake.base_url,
        "model": "gpt-4.1-mini",
        "max_retries": 0,
        "request_timeout_s": 20,
        "progress": False,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def sent_texts(fake: FakeOpenAI) -> list[str]:
    return [
        last_user_text(r["body"]) for r in fake.requests if r["path"].endswith("/chat/completions")
    ]


def test_a_3_mb_session_in_a_100k_window_reaches_the_model_whole_and_ends_in_one_success(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    markers = long_session(tmp_path / "archive", megabytes=3, turns=24)
    (path,) = (tmp_path / "archive").rglob("*.jsonl")
    assert path.stat().st_size >= 3_000_000 and len(markers) > 1_000
    s = settings(tmp_path, fake_openai, context_window=100_000)
    ingest_archive(s)

    summary = extract_store(s)

    assert summary.outcomes == {"succeeded": 1}
    texts = sent_texts(fake_openai)
    seen = set()
    for text in texts:
        seen.update(MARK.findall(text))
    assert seen == set(markers)  # every marker reached the server in some request
    assert not any("tokens truncated" in text for text in texts)
    chunks = [t for t in texts if "<rollout_contents>" in t]
    merges = [t for t in texts if "<partial_memories>" in t]
    assert len(chunks) >= 8 and len(merges) == 1
    assert all(f"part {n} of {len(chunks)}" in t for n, t in enumerate(sorted(
        chunks, key=lambda t: int(re.search(r"part (\d+) of", t).group(1))), start=1))  # type: ignore[union-attr]  # fmt: skip
    # each chunk starts at a turn (a user message), and is within the window with the reserve
    for text in chunks:
        first = text.split("<rollout_contents>\n", 1)[1].split("\n", 1)[0]
        assert json.loads(first)["role"] == "user"
    assert summary.requests == len(texts) == fake_openai.count()
    assert summary.sessions_chunked == 1 and summary.chunks_cut == 0
    assert (summary.chunk_requests, summary.merge_requests) == (len(chunks), 1)
    # one output, stored as a single request's is; the attempt says what it took
    (output,) = rows(s.db, "select raw_memory, input_hash from stage1_outputs")
    assert output[0] and len(output[1]) == 64
    (attempt,) = rows(
        s.db,
        "select outcome, chunk_requests, merge_requests, chunks_mid_turn, chunks_cut, "
        "input_tokens, output_tokens from stage1_attempts",
    )
    assert attempt[:5] == ("succeeded", len(chunks), 1, 0, 0)
    assert attempt[5] == summary.input_tokens > 8 * 50_000
    (usage,) = rows(
        s.db, "select requests, input_tokens, output_tokens from model_usage where kind = 'actual'"
    )
    assert usage == (len(texts), summary.input_tokens, summary.output_tokens)
    assert ("sessions in chunks", "1") in extract_section(summary)[1]
    # up to date: a second run sends nothing
    fake_openai.reset()
    assert extract_store(s).requests == 0 and fake_openai.count() == 0


def test_one_turn_longer_than_the_budget_is_split_between_its_items_not_cut(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    markers = long_session(tmp_path / "archive", megabytes=0.3, turns=1)
    s = settings(tmp_path, fake_openai, context_window=20_000)
    ingest_archive(s)

    summary = extract_store(s)

    assert summary.outcomes == {"succeeded": 1}
    seen = set()
    for text in sent_texts(fake_openai):
        seen.update(MARK.findall(text))
    assert seen == set(markers)
    ((requests, mid_turn, cut),) = rows(
        s.db, "select chunk_requests, chunks_mid_turn, chunks_cut from stage1_attempts"
    )
    assert requests >= 3 and mid_turn == requests - 1 and cut == 0


def test_a_chunk_request_that_fails_fails_the_whole_session_and_a_rerun_extracts_it(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    long_session(tmp_path / "archive", megabytes=0.3, turns=6)
    s = settings(tmp_path, fake_openai, context_window=20_000, max_retries=1, retry_delay_hours=0)
    ingest_archive(s)
    faults = [Reply("status", status=429, retry_after=0), Reply("broken_json")]

    def route(body: dict[str, Any]) -> Reply | None:
        # the third chunk: rate-limited, then (the client retries) an answer that is not JSON
        if "part 3 of" in last_user_text(body) and faults:
            return faults.pop(0)
        return None

    fake_openai.route(route)
    failed = extract_store(s)

    assert failed.outcomes == {"failed:invalid_json": 1} and not faults
    assert rows(s.db, "select count(*) from stage1_outputs") == [(0,)]  # nothing half-stored
    ((outcome, reason, chunk_requests, merges, tokens),) = rows(
        s.db,
        "select outcome, reason, chunk_requests, merge_requests, input_tokens from stage1_attempts",
    )
    assert (outcome, reason, merges) == ("failed", "invalid_json", 0)
    assert chunk_requests >= 3 and tokens > 0  # the requests sent are counted, and paid
    assert failed.requests == chunk_requests == fake_openai.count() - 1  # the 429 was retried

    fake_openai.reset()
    again = extract_store(s)
    assert again.outcomes == {"succeeded": 1}
    assert rows(s.db, "select count(*) from stage1_outputs") == [(1,)]
    assert rows(s.db, "select outcome, count(*) from stage1_attempts group by all order by 1") == [
        ("failed", 1),
        ("succeeded", 1),
    ]


def test_a_session_that_fits_is_one_request_without_a_part_note(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    long_session(tmp_path / "archive", megabytes=0.05, turns=2)
    s = settings(tmp_path, fake_openai, context_window=100_000)
    ingest_archive(s)
    summary = extract_store(s)
    assert summary.outcomes == {"succeeded": 1} and summary.requests == 1
    (text,) = sent_texts(fake_openai)
    assert "part 1 of" not in text and "<partial_memories>" not in text
    assert rows(s.db, "select chunk_requests, chunks_cut from stage1_attempts") == [(None, None)]
    assert summary.sessions_chunked == 0


@pytest.mark.parametrize("backend", ["heuristic"])
def test_the_heuristic_backend_reads_a_long_session_as_before(tmp_path: Path, backend: str) -> None:
    long_session(tmp_path / "archive", megabytes=0.3, turns=3)
    s = Settings(
        archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
        min_rollout_idle_hours=0, backend=backend, context_window=20_000, progress=False,
    )  # fmt: skip
    ingest_archive(s)
    summary = extract_store(s)
    assert summary.outcomes == {"succeeded": 1} and summary.requests == 0
    assert summary.sessions_chunked == 0


def test_the_batch_backend_extracts_a_long_session_in_chunks_through_the_request_path(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    markers = long_session(tmp_path / "archive", megabytes=0.3, turns=4)
    long_session(tmp_path / "archive", megabytes=0.02, turns=1, n=8)  # fits: in the batch
    s = settings(tmp_path, fake_openai, backend="openai-batch", context_window=20_000)
    fake_openai.batch_polls_in_progress = 0
    ingest_archive(s)

    first = extract_store(s)

    assert first.batched == 1 and first.outcomes == {"succeeded": 1}
    assert first.sessions_chunked == 1
    texts = sent_texts(fake_openai)  # the chunks and the merge, sent at once
    assert first.requests == len(texts) + 1 and len(texts) >= 3
    seen = set()
    for text in texts:
        seen.update(MARK.findall(text))
    assert seen == set(markers)
    # sent one by one: paid at the ordinary price, not the batch's
    ((tokens_in, tokens_out, cost),) = rows(
        s.db, "select input_tokens, output_tokens, cost_usd from stage1_attempts"
    )
    assert cost == pytest.approx(
        PriceBook({}).cost("openai", "gpt-4.1-mini", tokens_in, tokens_out)
    )
    second = extract_store(s)  # applies the batch
    assert second.outcomes == {"succeeded": 1}
    (batch,) = fake_openai.batches.values()
    assert batch["request_counts"]["total"] == 1  # only the session that fits
    assert rows(s.db, "select count(*) from stage1_outputs") == [(2,)]


def test_partial_memories_too_many_for_one_merge_are_merged_in_rounds(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    long_session(tmp_path / "archive", megabytes=0.6, turns=12)
    s = settings(tmp_path, fake_openai, context_window=6_000, max_output_tokens=1_000)
    ingest_archive(s)

    summary = extract_store(s)

    assert summary.outcomes == {"succeeded": 1}
    merges = [t for t in sent_texts(fake_openai) if "<partial_memories>" in t]
    assert summary.merge_requests == len(merges) >= 3  # a round of merges, then the last
    assert summary.chunk_requests > 25 and summary.chunks_cut == 0
    last = merges[-1]
    assert "### Parts 1 to " in last  # the last merge reads merged memories
    assert rows(s.db, "select count(*) from stage1_outputs") == [(1,)]


def test_a_chunked_session_holds_only_the_messages_in_flight_not_all_its_chunks(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Each chunk's message is built when it is sent: with two requests in flight, no more
    than two chunk messages exist at any request the server receives (built all at once,
    a 30 MiB session's ~70 messages took four times its size, several sessions together)."""
    long_session(tmp_path / "archive", megabytes=3, turns=24)
    s = settings(tmp_path, fake_openai, context_window=100_000, concurrency=2)
    ingest_archive(s)
    part = re.compile(r"part \d+ of \d+")
    alive: list[int] = []
    one_at_a_time = threading.Lock()  # a count's list of every object holds them meanwhile

    def held() -> int:
        # live objects only: garbage not yet collected (this test's, or an earlier test's
        # on the same worker) is held by nobody
        gc.collect()
        found = gc.get_objects()
        try:
            return sum(isinstance(o, StageOneInput) and bool(part.search(o.user)) for o in found)
        finally:
            del found

    def count(body: dict[str, Any]) -> None:
        if "<rollout_contents>" in last_user_text(body):
            with one_at_a_time:
                alive.append(held() - before)

    fake_openai.route(count)

    before = held()  # what earlier tests on this worker still hold
    summary = extract_store(s)

    assert summary.outcomes == {"succeeded": 1} and summary.chunk_requests >= 8
    assert len(alive) == summary.chunk_requests
    assert 1 <= max(alive) <= 2, alive
