"""Model faults against the local fake server: every fault ends in its documented outcome,
nothing a model says reaches a file name, a file or the store unredacted, and a rerun after
the server recovers completes every retryable job without waiting out the retry delay."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from memkiln.llm.ratelimit import TRIES_PER_REQUEST
from memkiln.pipeline.consolidate import consolidate_store
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.builders import make_archive, uid
from tests.fake_openai import TRICK_SECRET, FakeOpenAI, Reply, last_user_text

#: Session number -> the fault its request meets, and the outcome it must end in. Faults of
#: the service are kept apart by good answers, so that no streak stops the run.
FAULTS: dict[int, tuple[Reply, str]] = {
    0: (Reply("status", status=429, retry_after=0.05), "failed:rate_limited"),
    1: (Reply("extra_key"), "failed:schema_mismatch"),
    2: (Reply("status", status=429), "failed:rate_limited"),  # no Retry-After: backoff
    3: (Reply("missing_key"), "failed:schema_mismatch"),
    4: (Reply("status", status=500), "failed:server_error"),
    5: (Reply("wrong_type"), "failed:schema_mismatch"),
    6: (Reply("status", status=503), "failed:server_error"),
    7: (Reply("raw", content=""), "failed:invalid_json"),  # an empty body
    8: (Reply("reset"), "failed:connection_error"),
    9: (Reply("raw", content="<html>502 upstream</html>"), "failed:invalid_json"),
    10: (Reply("timeout", delay=3), "failed:timeout"),
    11: (Reply("broken_json"), "failed:invalid_json"),
    12: (Reply("too_long"), "failed:answer_too_long"),
    13: (Reply("refusal"), "failed:refused"),
    14: (Reply("truncated"), "failed:truncated"),
    15: (Reply("tricks"), "succeeded"),
    16: (Reply("ok"), "succeeded"),
    17: (Reply("noop"), "succeeded_no_output"),
}
#: Faults of the service, which the client retries and the next run sends again at once.
RETRYABLE = {"rate_limited", "server_error", "timeout", "connection_error"}
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def settings(tmp_path: Path, fake: FakeOpenAI, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "out": tmp_path / "memories",
        "backfill": True,
        "min_rollout_idle_hours": 0,
        "backend": "openai",
        "base_url": fake.base_url,
        "model": "fake-model",
        "max_retries": 1,
        "request_timeout_s": 1,
        "concurrency": 4,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def route_by_session(faults: dict[int, Reply]):  # type: ignore[no-untyped-def]
    def route(body: dict) -> Reply | None:  # type: ignore[type-arg]
        text = last_user_text(body)
        for n, reply in faults.items():
            if uid(n) in text:
                return reply
        return None

    return route


def test_every_model_fault_ends_in_its_documented_outcome_and_a_rerun_completes_the_retryable(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", len(FAULTS))
    s = settings(tmp_path, fake_openai)
    ingest_archive(s)
    fake_openai.route(route_by_session({n: reply for n, (reply, _) in FAULTS.items()}))

    first = extract_store(s)

    got = dict(rows(s.db, "select rollout_id, status || coalesce(':' || last_reason, '') from stage1_jobs"))  # fmt: skip
    want = {uid(n): outcome for n, (_, outcome) in FAULTS.items()}
    assert got == want
    assert first.stopped is None
    failed = sum(1 for o in want.values() if o.startswith("failed"))
    assert first.sessions_failed == failed == 15
    # the client retried what can succeed later (once here), and never a malformed answer;
    # a 429 went again each time the run's pace admitted it, until the request's tries
    hits = {
        n: sum(uid(n) in last_user_text(r["body"]) for r in fake_openai.requests) for n in FAULTS
    }
    assert hits[4] == hits[6] == 2
    assert hits[0] == hits[2] == TRIES_PER_REQUEST
    assert hits[1] == hits[11] == hits[13] == hits[14] == 1
    # a refusal keeps the model's words (one line) as its detail
    (detail,) = rows(s.db, f"select last_error from stage1_jobs where rollout_id = '{uid(13)}'")
    assert "can't help" in str(detail[0])

    # the answer full of tricks was stored redacted and clean
    (stored,) = rows(
        s.db,
        "select raw_memory, rollout_summary, rollout_slug from stage1_outputs "
        f"where rollout_id = '{uid(15)}'",
    )
    for text in stored:
        assert TRICK_SECRET not in str(text) and "AKIAIOSFODNN7EXAMPLQ" not in str(text)
        assert not UNSAFE.search(str(text))

    # the server recovers: the next run, at once and with the default one-hour retry delay,
    # sends every job the service failed again and completes it; the others wait
    fake_openai.route(lambda body: None)
    again = extract_store(s)
    retryable = sum(1 for o in want.values() if o.split(":")[-1] in RETRYABLE)
    assert retryable == 6
    assert again.decisions == {
        "take": retryable, "retry_later": failed - retryable, "up_to_date": 3
    }  # fmt: skip
    assert again.outcomes == {"succeeded": retryable} and again.sessions_failed == 0


def test_a_consolidation_answer_full_of_secrets_and_paths_writes_only_safe_names_and_text(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 2)
    s = settings(tmp_path, fake_openai)
    ingest_archive(s)
    fake_openai.default = Reply("tricks")  # stage one and phase 2 alike
    assert extract_store(s).outcomes == {"succeeded": 2}
    summary = consolidate_store(s)
    assert summary.projects_failed == 0 and set(summary.projects.values()) == {"succeeded"}

    written = sorted(p for p in s.out.rglob("*") if p.is_file())
    names = [str(p.relative_to(s.out)) for p in written]
    assert any(n.endswith("/SKILL.md") for n in names), names
    for path in written:
        assert path.resolve().is_relative_to(s.out.resolve())
        text = path.read_text(encoding="utf-8")
        assert TRICK_SECRET not in text and "AKIAIOSFODNN7EXAMPLQ" not in text, path
        assert not UNSAFE.search(text), path
    lowered = "\n".join(names).lower()
    assert TRICK_SECRET.lower()[8:20] not in lowered and "akiaiosfodnn7examplq" not in lowered
    assert not list(tmp_path.glob("etc")) and not (s.out.parent / "etc").exists()


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (Reply("status", status=401), "auth_error"),
        (Reply("status", status=404), "not_found"),
        (Reply("reset"), "connection_error"),
        (Reply("status", status=503), "server_error"),
    ],
)
def test_after_an_outage_the_next_run_completes_every_session_at_once(
    tmp_path: Path, fake_openai: FakeOpenAI, fault: Reply, reason: str
) -> None:
    make_archive(tmp_path / "archive", 12)
    s = settings(tmp_path, fake_openai, concurrency=2, max_retries=0)
    ingest_archive(s)
    fake_openai.default = fault
    down = extract_store(s)
    # the run stops after 8 failures in a row and charges none of them
    assert down.stopped is not None and f"failed with {reason}" in down.stopped
    assert down.sessions_failed == sum(down.outcomes.values()) >= 8
    assert rows(s.db, "select max(attempts) from stage1_jobs") == [(0,)]

    fake_openai.default = Reply("ok")
    up = extract_store(s)  # the default one-hour retry delay is not waited out
    assert up.decisions == {"take": 12}
    assert up.outcomes == {"succeeded": 12} and up.sessions_failed == 0


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (Reply("refusal"), "refused"),
        (Reply("truncated"), "truncated"),
        (Reply("status", status=500), "server_error"),
        (Reply("wrong_type"), "schema_mismatch"),
    ],
)
def test_a_consolidation_fault_fails_its_project_with_its_reason_and_writes_nothing_of_it(
    tmp_path: Path, fake_openai: FakeOpenAI, fault: Reply, reason: str
) -> None:
    make_archive(tmp_path / "archive", 2)
    s = settings(tmp_path, fake_openai, max_retries=0)
    ingest_archive(s)
    assert extract_store(s).outcomes == {"succeeded": 2}

    def phase_two(body: dict) -> Reply | None:  # type: ignore[type-arg]
        return fault if "memory_md" in str(body.get("response_format")) else None

    fake_openai.route(phase_two)
    summary = consolidate_store(s)
    assert summary.projects_failed == 1
    (line,) = summary.failures.values()
    assert line.split(":")[0] == reason and "\n" not in line
    assert rows(s.db, "select status, last_reason from consolidation_jobs") == [("failed", reason)]
    assert not list(s.out.glob("*/MEMORY.md"))
    fake_openai.route(lambda body: None)  # the model recovers: the next run writes the project
    again = consolidate_store(s)
    assert again.projects_failed == 0 and list(again.projects.values()) == ["succeeded"]


# ------------------------------------------------------------------ the Responses API

#: Faults whose shape differs between the two APIs (a refusal part, an incomplete response,
#: a body that is no response), and the outcomes they end in, as with Chat Completions.
RESPONSES_FAULTS: dict[int, tuple[Reply, str]] = {
    0: (Reply("refusal"), "failed:refused"),
    1: (Reply("truncated"), "failed:truncated"),
    2: (Reply("ok"), "succeeded"),
    3: (Reply("broken_json"), "failed:invalid_json"),
    4: (Reply("raw", content=""), "failed:invalid_json"),
    5: (Reply("wrong_type"), "failed:schema_mismatch"),
    6: (Reply("tricks"), "succeeded"),
    7: (Reply("status", status=500), "failed:server_error"),
    8: (Reply("noop"), "succeeded_no_output"),
}


def test_model_faults_over_the_responses_api_end_in_the_same_outcomes(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", len(RESPONSES_FAULTS))
    s = settings(tmp_path, fake_openai, api="responses", max_retries=0)
    ingest_archive(s)
    fake_openai.route(route_by_session({n: r for n, (r, _) in RESPONSES_FAULTS.items()}))

    extract_store(s)

    assert all(r["path"].endswith("/responses") for r in fake_openai.requests)
    got = dict(rows(s.db, "select rollout_id, status || coalesce(':' || last_reason, '') from stage1_jobs"))  # fmt: skip
    assert got == {uid(n): outcome for n, (_, outcome) in RESPONSES_FAULTS.items()}
    (detail,) = rows(s.db, f"select last_error from stage1_jobs where rollout_id = '{uid(0)}'")
    assert "can't help" in str(detail[0])
    (stored,) = rows(s.db, f"select raw_memory, rollout_summary, rollout_slug from stage1_outputs where rollout_id = '{uid(6)}'")  # fmt: skip
    for text in stored:
        assert TRICK_SECRET not in str(text) and "AKIAIOSFODNN7EXAMPLQ" not in str(text)
        assert not UNSAFE.search(str(text))


# ------------------------------------------------------------------ a session in chunks


def chunked(tmp_path: Path, fake: FakeOpenAI) -> Settings:
    """One session of about 0.3 MB that a 20,000-token window reads in several chunks."""
    from tests.pipeline.test_extract_chunks import long_session

    long_session(tmp_path / "archive", megabytes=0.3, turns=6)
    s = settings(tmp_path, fake, context_window=20_000, max_retries=0, request_timeout_s=20)
    ingest_archive(s)
    return s


def is_merge(body: dict) -> bool:  # type: ignore[type-arg]
    return "<partial_memories>" in last_user_text(body)


@pytest.mark.parametrize(
    ("where", "fault", "reason"),
    [
        ("chunk", Reply("refusal"), "refused"),
        ("chunk", Reply("truncated"), "truncated"),
        ("merge", Reply("refusal"), "refused"),
        ("merge", Reply("truncated"), "truncated"),
    ],
)
def test_a_refusal_or_a_cut_answer_in_a_chunked_session_fails_it_with_its_own_reason(
    tmp_path: Path, fake_openai: FakeOpenAI, where: str, fault: Reply, reason: str
) -> None:
    s = chunked(tmp_path, fake_openai)

    def route(body: dict) -> Reply | None:  # type: ignore[type-arg]
        text = last_user_text(body)
        hit = is_merge(body) if where == "merge" else "part 2 of" in text and not is_merge(body)
        return fault if hit else None

    fake_openai.route(route)
    summary = extract_store(s)

    assert summary.outcomes == {f"failed:{reason}": 1}
    assert rows(s.db, "select status, last_reason from stage1_jobs") == [("failed", reason)]
    assert rows(s.db, "select count(*) from stage1_outputs") == [(0,)]
    (merges,) = rows(s.db, "select merge_requests from stage1_attempts")
    assert merges[0] == (1 if where == "merge" else 0)
    if reason == "refused":
        (detail,) = rows(s.db, "select last_error from stage1_jobs")
        assert "can't help" in str(detail[0])


def test_chunk_answers_full_of_tricks_reach_the_merge_only_as_data_and_nothing_leaks(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    s = chunked(tmp_path, fake_openai)
    fake_openai.route(lambda body: None if is_merge(body) else Reply("tricks"))

    assert extract_store(s).outcomes == {"succeeded": 1}

    merges = [last_user_text(r["body"]) for r in fake_openai.requests if is_merge(r["body"])]
    assert len(merges) == 1
    (merge,) = merges
    head, rest = merge.split("\n<partial_memories>\n", 1)
    inside, after = rest.rsplit("\n</partial_memories>\n", 1)
    assert "SYSTEM OVERRIDE" not in head and "SYSTEM OVERRIDE" not in after
    assert "SYSTEM OVERRIDE" in inside and "</" not in inside  # no tag of any kind closes
    for request in fake_openai.requests:
        sent = last_user_text(request["body"])
        assert TRICK_SECRET not in sent and "AKIAIOSFODNN7EXAMPLQ" not in sent
        assert "\x00" not in sent and "\u202e" not in sent


# ------------------------------------------------------------------ as a user runs it


def test_an_outage_makes_memkiln_extract_exit_1_with_one_line_on_why_it_stopped(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Every request fails (the connection is reset): the command says so and exits 1."""
    import os
    import subprocess
    import sys

    make_archive(tmp_path / "archive", 10)
    s = settings(tmp_path, fake_openai)
    ingest_archive(s)
    fake_openai.default = Reply("reset")
    script = str(Path(sys.executable).with_name("memkiln"))
    env = os.environ | {"MEMKILN_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    done = subprocess.run(
        [script, "extract", "--db", str(s.db), "--backend", "openai", "--base-url",
         fake_openai.base_url, "--model", "fake-model", "--max-retries", "0", "--backfill",
         "--min-idle-hours", "0", "--concurrency", "2", "--no-prefect", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    stopped = [line for line in done.stdout.splitlines() if "stopped early" in line]
    assert len(stopped) == 1 and "connection_error" in stopped[0], done.stdout


# ------------------------------------------------------------------ the Batch API


def test_broken_lines_in_a_batch_output_file_fail_only_their_sessions(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """The output file of a batch comes from the service: a line cut short, a line that is
    not an object with a custom_id, a line without a response object. Each fails its own
    session; the others are applied and the batch is done (a broken line stopped every run
    that collected the batch, for good)."""
    import json

    make_archive(tmp_path / "archive", 4)
    s = settings(tmp_path, fake_openai, backend="openai-batch", max_retries=0)
    ingest_archive(s)
    fake_openai.batch_polls_in_progress = 10**6  # the first run leaves the batch open
    first = extract_store(s)
    assert first.batched == 4
    (batch,) = fake_openai.batches.values()
    fake_openai._complete(batch)
    lines = fake_openai.files[batch["output_file_id"]].decode().splitlines()
    by_session = {json.loads(line)["custom_id"]: line for line in lines}
    assert set(by_session) == {uid(n) for n in range(4)}
    broken = [
        by_session[uid(0)][: len(by_session[uid(0)]) // 2],  # cut short
        json.dumps({"custom_id": 1, "response": json.loads(by_session[uid(1)])["response"]}),
        json.dumps({"custom_id": uid(2), "response": "<html>busy</html>"}),
        by_session[uid(3)],
        "<html>502 Bad Gateway</html>",
    ]
    fake_openai.files[batch["output_file_id"]] = ("\n".join(broken) + "\n").encode()

    second = extract_store(s)

    assert second.batches_open == 0
    got = dict(rows(s.db, "select rollout_id, status || coalesce(':' || last_reason, '') from stage1_jobs"))  # fmt: skip
    assert got == {
        uid(0): "failed:batch_unanswered",
        uid(1): "failed:batch_unanswered",
        uid(2): "failed:invalid_json",
        uid(3): "succeeded",
    }
    assert rows(s.db, "select status from stage1_batches") == [("applied",)]
