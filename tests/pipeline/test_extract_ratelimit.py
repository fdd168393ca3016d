"""Extraction at the service's rate limit: the run's one controller (``memkiln.llm.ratelimit``)
reads the limits every answer states, keeps what it sends under them, pauses the whole run
on a 429 and sends the refused request again, in this process and over the wire (as Dask
runs the calls). The controller's decisions are checked on a clock of its own; the runs
against the local server's rate-limited mode."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from memkiln.io.rules import load_rules
from memkiln.llm.ratelimit import (
    FIRST_IN_FLIGHT,
    FIRST_TOGETHER,
    GIVE_UP_AFTER,
    HOLD,
    Pace,
    Seen,
    duration,
    hold,
    seen_in,
    wait_until,
)
from memkiln.llm.requests import build_requests, request_tokens
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.tokens import count_tokens
from tests.builders import make_archive
from tests.fake_openai import FakeOpenAI, Reply
from tests.flows.test_extract_tasks import Wire


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limits(tokens: int, remaining: int, reset: str, **kw: object) -> Seen:
    headers = {
        "x-ratelimit-limit-tokens": str(tokens),
        "x-ratelimit-remaining-tokens": str(remaining),
        "x-ratelimit-reset-tokens": reset,
    }
    return seen_in(headers, **kw)  # type: ignore[arg-type]


def test_reset_times_are_read_as_providers_write_them() -> None:
    assert duration("6m0s") == 360
    assert duration("1.5s") == 1.5
    assert duration("20ms") == pytest.approx(0.02)
    assert duration("1h2m3s") == 3723
    assert duration("12") == 12
    assert duration("soon") is None and duration("5s later") is None and duration(None) is None


def test_a_few_requests_go_before_any_answer_then_the_stated_window_is_kept() -> None:
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        first = [await pace.admit(1_000) for _ in range(FIRST_IN_FLIGHT)]
        assert pace.wait(clock.now, 1_000) == math.inf  # the rest wait for an answer
        # the service allows 6,000 tokens per 10 s; the first requests used 4,000
        clock.now = first[0].sent + 1
        assert pace.settle(first[0], limits(6_000, 2_000, "10s")) is False
        assert (pace.window, pace.limit_tokens, pace.allowed) == (10.0, 6_000, 16)
        fifth = await pace.admit(1_000)
        await pace.admit(1_000)
        # full: the next fits once the first requests leave the window (sent at 100)
        wait = pace.wait(clock.now, 1_000)
        assert 10 - 1 < wait <= 10 - 1 + 0.1  # sent 1 s ago
        clock.now = first[0].sent + 10 + 0.1
        assert pace.wait(clock.now, 1_000) == 0
        # a request larger than what the first ones free waits for the fifth too
        assert pace.wait(clock.now, 4_500) == pytest.approx(fifth.sent + 10.05 - clock.now)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_the_requests_before_the_first_answer_are_let_go_together() -> None:
    # admitted as the send loop hands them out, their calls start as a task runner gets to
    # them (0.1-0.4 s apart on Dask): let go at one moment, they reach the service together
    # and every window after keeps that shape
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        first = []
        for offset in (0.0, 0.1, 0.25, 0.4):
            clock.now = 100 + offset
            first.append(await pace.admit(1_000))
            assert HOLD.get() == 100 + FIRST_TOGETHER
        assert {t.sent for t in first} == {100 + FIRST_TOGETHER}
        assert pace.started(first[-1]) == 100 + FIRST_TOGETHER  # not answered yet
        # once an answer came, a request goes as soon as there is room
        clock.now = first[0].sent + 1
        pace.settle(first[0], limits(10_000, 6_000, "10s"), started=at(first[0].sent))
        fifth = await pace.admit(1_000)
        assert fifth.sent == clock.now and HOLD.get() is None

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_the_first_window_waits_for_a_fresh_dask_workers_first_calls() -> None:
    # the first calls of fresh Dask workers reached their hold up to 1.56 s after their
    # admission (a load of 9; 1.16-1.19 s at a load of 2-3): let go before that, they
    # reached the service late, and the run's every window after with them
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        first = [await pace.admit(1_000) for _ in range(FIRST_IN_FLIGHT)]
        slowest_start = 100 + 1.56
        assert HOLD.get() is not None and HOLD.get() > slowest_start
        assert all(t.sent > slowest_start for t in first)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def at(seconds: float) -> datetime:
    """The wall-clock time ``seconds`` (the tests' clock serves as both)."""
    return datetime.fromtimestamp(seconds, UTC)


def test_a_call_that_starts_later_than_admitted_is_counted_from_its_start() -> None:
    # admitted in the flow's process, a call waits in a worker's queue before it is sent:
    # the service counts it from then, and so does the run's log
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        late = await pace.admit(1_000)  # at 100, let go at 101, sent at 102
        clock.now = 103
        pace.settle(late, limits(2_000, 1_000, "10s"), started=at(102))
        prompt = await pace.admit(1_000)  # at 103, sent at once
        clock.now = 104
        pace.settle(prompt, limits(2_000, 0, "10s"), started=at(103))
        # the window is full until the late one leaves it: 10 s after it was sent, not
        # after it was admitted
        assert pace.wait(clock.now, 1_000) == pytest.approx(102 + 10.05 - clock.now)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_a_request_is_admitted_ahead_of_its_room_and_held_until_the_windows_edge() -> None:
    # a call starts well after its admission (a worker's queue; the first, held, 0.5 s after
    # it was let go): a request is admitted that long before the window has room and its
    # call holds until the room comes, so the service sees it at the window's edge
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        first = await pace.admit(1_000)
        go = 100 + FIRST_TOGETHER
        assert HOLD.get() == pytest.approx(go)  # before any answer
        clock.now = go + 1
        pace.settle(first, limits(2_000, 1_000, "10s"), started=at(go + 0.5))
        second = await pace.admit(1_000)
        clock.now = go + 3
        pace.settle(second, limits(2_000, 0, "10s"), started=at(go + 2.5))
        room = go + 0.5 + 10.05  # the first leaves the window 10 s after its call started
        assert pace.wait(clock.now, 1_000) == pytest.approx(room - clock.now)
        ahead = pace.ahead()  # the first's delay, at most a quarter of the window
        assert ahead == pytest.approx(min(FIRST_TOGETHER + 0.5, 2.5))
        clock.now = room - ahead - 0.5  # too early still: admit would wait
        assert pace.wait(clock.now, 1_000) > pace.ahead()
        clock.now = room - ahead + 0.01
        third = await pace.admit(1_000)
        assert third.sent == pytest.approx(room) and HOLD.get() == pytest.approx(room)
        # not answered yet: counted from its room, or its admission plus the longest delay
        assert pace.started(third) == pytest.approx(room + 0.01)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_requests_admitted_during_a_pause_still_fit_the_window() -> None:
    # admitted ahead of a pause's end, requests still need the window's room then: not
    # every waiting request at once
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        clock.now = 101 - FIRST_TOGETHER
        first = await pace.admit(1_000)  # let go at 101, before any answer
        clock.now = 102
        pace.settle(first, limits(2_000, 1_000, "10s"), started=at(101.5))
        second = await pace.admit(1_000)
        clock.now = 102.6
        refused = limits(2_000, 1_000, "10s", limited=True, retry_after=1.0)
        assert pace.settle(second, refused, started=at(102.5)) is True
        # the longest delay from admission to a call's start: the first's, held (at most a
        # quarter of the window)
        assert pace.ahead() == pytest.approx(min(FIRST_TOGETHER + 0.5, 2.5))
        assert pace.margin() == pytest.approx(1.05)
        clock.now = 103.2  # the pause ends at 103.6: within the time a call takes to start
        await pace.admit(1_000)
        assert HOLD.get() == pytest.approx(103.6)  # held until the pause ends
        # the window is full (the first and this one) until the first leaves it
        assert pace.wait(clock.now, 1_000) == pytest.approx(101.5 + 11.05 - clock.now)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_a_429_says_when_there_is_room_not_what_others_use() -> None:
    # refused a moment before the run's previous request left the service's window: its
    # headers count that request still, which is not someone else's use of the limit
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(16, clock=clock, wall=clock)
        clock.now = 101 - FIRST_TOGETHER
        first = await pace.admit(2_000)  # let go at 101, before any answer
        clock.now = 102
        pace.settle(first, limits(2_000, 0, "10s"), started=at(101))
        clock.now = 111.06  # gone from the log
        early = await pace.admit(2_000)
        clock.now = 111.07
        refused = limits(2_000, 0, "10s", limited=True, retry_after=0.02)
        assert pace.settle(early, refused, started=at(111.06)) is True
        assert pace.wait(clock.now, 2_000) == pytest.approx(0.02)  # the pause, no more

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_a_held_call_is_sent_at_the_wall_clock_time_it_was_given() -> None:
    async def scenario() -> float:
        until = time.time() + 0.2
        await hold(until)
        return time.time() - until

    assert asyncio.run(scenario()) >= 0
    asyncio.run(hold(None))  # nothing to wait for
    asyncio.run(hold(time.time() - 5))  # already past
    until = time.time() + 0.2  # the same in a thread of its own (the backend's)
    wait_until(until)
    assert time.time() >= until
    wait_until(None)
    wait_until(time.time() - 5)


def test_a_429_pauses_every_request_for_the_time_asked_and_halves_those_in_flight() -> None:
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(8, clock=clock)
        pace.settle(await pace.admit(10), None)  # no limits stated: up to the ceiling
        assert pace.allowed == 8
        tickets = [await pace.admit(10) for _ in range(8)]
        assert pace.wait(clock.now, 10) == math.inf  # the ceiling
        refused = seen_in({"retry-after-ms": "2500"}, limited=True, retry_after=2.5)
        assert pace.settle(tickets[0], refused) is True  # goes again
        assert pace.allowed == 4 and pace.rate_limited == 1
        assert pace.wait(clock.now, 10) == math.inf  # 7 in flight, 4 allowed
        for ticket in tickets[1:]:
            pace.settle(ticket, None)
        assert pace.wait(clock.now, 10) == pytest.approx(2.5)  # every request waits
        clock.now += 2.5
        assert pace.wait(clock.now, 10) == 0
        # the quota spent: no wait makes it succeed
        spent = seen_in({}, limited=True, retry_after=None, retry=False)
        assert pace.settle(await pace.admit(10), spent) is False
        clock.now += 1  # the pause a 429 without a time asks for
        # a request larger than the stated limit fails at once
        too_big = limits(100, 100, "1s", limited=True, retry_after=1.0)
        assert pace.settle(await pace.admit(500), too_big) is False

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_a_429_the_log_did_not_foresee_keeps_requests_longer_in_it_not_fewer_in_flight() -> None:
    # the requests reach the service later than they were admitted (a loaded machine, a
    # Dask worker's queue): the service still counts one the log let go
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(4, clock=clock)
        first = await pace.admit(1_000)
        pace.settle(first, limits(2_000, 1_000, "10s"))
        assert pace.margin() == pytest.approx(0.05)
        await pace.admit(1_000)
        clock.now = first.sent + 10.06  # gone from the log: room for one more
        late = await pace.admit(1_000)
        refused = limits(2_000, 0, "9.9s", limited=True, retry_after=0.4)
        assert pace.settle(late, refused) is True
        assert pace.margin() == pytest.approx(0.45)
        # the window is stated: the log paces the run, the requests in flight are not halved
        assert pace.allowed == 4
        clock.now += 0.4  # the pause
        for _ in range(10):  # every answer after takes a hundredth off
            pace.settle(await pace.admit(0), None)
        assert pace.margin() == pytest.approx(0.05 + 0.4 * 0.99**10)

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_many_429s_in_a_row_end_the_resending() -> None:
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(2, clock=clock)
        refused = seen_in({}, limited=True, retry_after=0.0)
        again = []
        for _ in range(GIVE_UP_AFTER):
            again.append(pace.settle(await pace.admit(1), refused))
        assert again[:-1] == [True] * (GIVE_UP_AFTER - 1) and again[-1] is False

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def test_others_use_of_the_limit_counts_until_it_leaves_the_window() -> None:
    async def scenario() -> None:
        clock = Clock()
        pace = Pace(4, clock=clock)
        first = await pace.admit(1_000)
        # the service counted 4,000 of 5,000: 3,000 of them are not this run's
        pace.settle(first, limits(5_000, 1_000, "10s"))
        assert pace.wait(clock.now, 1_000) == 0
        await pace.admit(1_000)
        assert pace.wait(clock.now, 1_000) > 0
        clock.now = first.sent + 10.1
        assert pace.wait(clock.now, 1_000) == 0

    asyncio.run(asyncio.wait_for(scenario(), 30))  # a wait on the frozen clock: an error


def settings(tmp_path: Path, fake: FakeOpenAI, **kw: object) -> Settings:
    base: dict[str, object] = {
        "archive": tmp_path / "archive",
        "db": tmp_path / "m.duckdb",
        "backfill": True,
        "min_rollout_idle_hours": 0,
        "progress": False,
        "backend": "openai",
        "base_url": fake.base_url,
        "model": "fake-model",
        "max_retries": 0,
        "request_timeout_s": 30,
        "concurrency": 16,
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


def run_tokens(s: Settings) -> int:
    """Every request's tokens as the server counts them (input and the most output)."""
    with duckdb.connect(str(s.db)) as con:
        todo = con.sql("select rollout_id, updated_at from rollouts").pl()
        built = build_requests(con, todo, settings=s, rules=load_rules(), chunked=True)
    return sum(sum(request_tokens(r, s.max_output_tokens)[1:]) for r in built)


@pytest.mark.parametrize("over_the_wire", [False, True])
def test_a_run_far_over_the_limit_completes_every_session_without_a_burst_of_429s(
    tmp_path: Path, fake_openai: FakeOpenAI, over_the_wire: bool
) -> None:
    # 12 sessions, the server admitting a third of the run's tokens per 2 s window (four
    # requests: as many as go before the first answer; the requests differ by a token or
    # two), 16 allowed in flight: sent at once, 8 of the first 12 requests would be refused
    make_archive(tmp_path / "archive", 12)
    s = settings(tmp_path, fake_openai)
    ingest_archive(s)
    fake_openai.token_counter = count_tokens
    fake_openai.latency = 0.2
    window = fake_openai.limit(tokens=run_tokens(s) // 3 + 16, window=2.0)
    summary = extract_store(s, dispatch=Wire(s) if over_the_wire else None)
    assert summary.outcomes == {"succeeded": 12} and summary.sessions_failed == 0
    received = fake_openai.count("/chat/completions")
    assert len(window.log) == 12 and received == 12 + window.refused
    # every refused request went again; a few at most, never a burst: the requests held
    # until a window's edge go together, and on a loaded machine they may reach the server
    # a moment before its window has room (one window's requests; the margin grows then)
    assert summary.rate_limited == window.refused <= 12 // 3
    if over_the_wire:  # the calls' answers carried the limits back to the run's controller
        assert summary.requests == 12


def test_a_429_pauses_the_run_and_the_refused_request_goes_again_until_it_succeeds(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 4)
    s = settings(tmp_path, fake_openai, concurrency=2)
    ingest_archive(s)
    # the service refuses three requests with a Retry-After, then answers every one
    fake_openai.script(*[Reply("status", status=429, retry_after=0.05)] * 3)
    summary = extract_store(s)
    assert summary.outcomes == {"succeeded": 4}
    assert summary.rate_limited == 3 and fake_openai.count("/chat/completions") == 7
