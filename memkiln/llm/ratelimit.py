"""One run's pace against the provider's rate limits: how many requests are in flight and
how many tokens are sent per window, kept just under the limits the provider's answers state.

Every answer of an OpenAI-compatible service may carry its limits
(``x-ratelimit-limit-/remaining-/reset-requests`` and ``…-tokens``); a request past them gets
429 with ``retry-after-ms`` / ``Retry-After``. ``Pace`` is the run's one controller (its
sending loop's, in the flow's process, whatever runs the calls: this process, threads or Dask
workers, which send each answer's ``Seen`` back with its outcome):

- the first few requests (``FIRST_IN_FLIGHT``) go before any answer, as a connection starts
  with a window of several segments: the first answer tells whether the service states
  limits, and a service that does admits a few requests at once (a limit of one request
  costs at most that many 429s, once); they are let go together (``FIRST_TOGETHER`` after
  the first is admitted), so that the first window's requests reach the service at one
  moment however their calls' start-up spreads them, and every window after keeps that shape;
- the service's window is taken as the longest reset time it stated (a request admitted into
  an empty window resets it that long after); the run keeps its own log of what it sent
  (each request counted for its input plus the most output it may produce, as providers count
  it), and a request is admitted when the log's requests and tokens of the last window, plus
  what the service counted for others at the last answer, leave room for it (a request
  leaves the log a margin after the window: more after 429s the log did not foresee);
- a request is sent at the window's edge: admitted in the flow's process, a call starts
  later (a Prefect task, a Dask worker's queue, a loaded machine), so a request is admitted
  ahead of the room by the longest recent delay from admission to a call's start (at most a
  quarter of the window) and its request holds until the room comes (``HOLD``, the
  wall-clock time the backend waits for in its sending thread, the request's body built:
  ``wait_until``; ``hold`` before a chunked session's requests), and is counted from when
  it left (the outcome's ``started_at``; not answered yet: from the room, or its admission
  plus the longest recent delay if later);
- a 429 pauses the whole run for the time the service asked and the request goes again once
  admitted; when the service states no window, the requests allowed in flight are halved too
  (one more for each answer after, up to ``--concurrency``, the ceiling): with a stated
  window the log paces the run, and a 429 there says the log was early (its margin grows,
  above), not that too many were in flight; a request fails ``rate_limited`` only when the
  service refuses the run's requests many times in a row, refuses that one request many
  times, states a limit it alone passes, or says the quota is spent.

Pure bookkeeping on the run's event loop (no lock); ``admit`` waits without blocking it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

#: The service refused this many requests in a row (429s, run-wide, with no answer between;
#: twice ``--concurrency`` when more): the last fails ``rate_limited``.
GIVE_UP_AFTER = 20
#: A request refused this many times fails ``rate_limited`` (a limit it alone passes).
TRIES_PER_REQUEST = 6
#: Requests in flight before the first answer (then ``--concurrency``, or what it states).
FIRST_IN_FLIGHT = 4
#: The requests that go before the first answer are let go together, this many seconds after
#: the first of them is admitted: the service's window begins when the first arrives, and
#: the others would otherwise follow as their calls start (a Prefect task run created, a
#: Dask worker's first task: 0.1-0.4 s apart), each late by as much in every window after.
#: A fresh Dask worker's first calls reached their hold 0.4-1.2 s after their admission at
#: loads of 2-4, 1.56 s at a load of 9: one that comes later goes late (``bench/RESULTS.md``).
FIRST_TOGETHER = 2.0
#: How many of the last calls' delays (admission to the call's start) are remembered.
DELAYS_KEPT = 32
#: A request is admitted ahead of its room by at most this share of the window.
AHEAD_MOST = 0.25

#: The wall-clock time before which the call just admitted (``Pace.admit``, in this task's
#: context) must not be sent; None: at once. The dispatch carries it to the backend, which
#: waits for it (``wait_until``, ``hold``).
HOLD: ContextVar[float | None] = ContextVar("memkiln_hold", default=None)


async def hold(until: float | None) -> None:
    """Wait until the wall-clock time ``until`` (None or past: not at all)."""
    if until is not None and until > time.time():
        await asyncio.sleep(until - time.time())


def wait_until(until: float | None) -> None:
    """Block this thread until the wall-clock time ``until`` (None or past: not at all)."""
    left = 0.0 if until is None else until - time.time()
    if left > 0:
        time.sleep(left)


#: The pause after a 429 that names no time.
DEFAULT_RETRY_AFTER = 1.0
#: Added to the window before a request sent leaves it: the service counts a request from
#: when it arrives, a little after it was sent (a fraction of the window, at least this).
#: A 429 the run's own log did not foresee (the requests reach the service later than they
#: were admitted: a loaded machine, a Dask worker's queue) adds the time the service asked
#: to wait, up to a quarter of the window; each answer after takes a hundredth off again.
MARGIN_SECONDS = 0.05
MARGIN_SHARE = 0.005
MARGIN_MOST = 0.25
MARGIN_DECAY = 0.99

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration(text: str | None) -> float | None:
    """Seconds of a reset time as providers write it (``6m0s``, ``1.5s``, ``20ms``, ``12``)."""
    if text is None:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text.strip())
    except ValueError:
        return None


@dataclass(frozen=True)
class Seen:
    """What a call's last answer said of the limits (None: not stated), and whether the
    service refused it for a rate limit (``retry``: the request may be sent again)."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: float | None = None
    limited: bool = False
    retry_after: float | None = None
    retry: bool = True

    @property
    def states_limits(self) -> bool:
        return self.limit_tokens is not None or self.limit_requests is not None

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any] | None) -> Seen | None:
        return None if wire is None else cls(**wire)


def seen_in(
    headers: Mapping[str, str],
    *,
    limited: bool = False,
    retry_after: float | None = None,
    retry: bool = True,
) -> Seen:
    """The limits stated by an answer's headers (``retry_after``: the client's own reading
    of ``retry-after-ms`` / ``Retry-After``)."""
    return Seen(
        limit_requests=_int(headers.get("x-ratelimit-limit-requests")),
        remaining_requests=_int(headers.get("x-ratelimit-remaining-requests")),
        reset_requests=duration(headers.get("x-ratelimit-reset-requests")),
        limit_tokens=_int(headers.get("x-ratelimit-limit-tokens")),
        remaining_tokens=_int(headers.get("x-ratelimit-remaining-tokens")),
        reset_tokens=duration(headers.get("x-ratelimit-reset-tokens")),
        limited=limited,
        retry_after=retry_after,
        retry=retry,
    )


@dataclass(eq=False)  # each call's own: equal figures are still two calls
class Ticket:
    """A call admitted: when it may be sent (the pace's clock, and the wall clock), what it
    was counted for, when it was admitted, and, once answered, when the call started (the
    pace's clock)."""

    sent: float
    tokens: int
    requests: int
    wall: float = 0.0
    start: float | None = None
    admitted: float = 0.0
    admitted_wall: float = 0.0


class Pace:
    """The run's controller (see the module's docstring); ``ceiling``: ``--concurrency``."""

    def __init__(
        self,
        ceiling: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.ceiling = ceiling
        self.clock = clock
        self.wall = wall
        #: requests allowed in flight (AIMD); a few until the first answer
        self.allowed = float(min(ceiling, FIRST_IN_FLIGHT))
        #: the last calls' delays from their admission to their start
        self.delays: deque[float] = deque(maxlen=DELAYS_KEPT)
        self.known = False
        #: when the requests admitted before the first answer go (``_together``)
        self._first: tuple[float, float] | None = None
        self.in_flight = 0
        self.window: float | None = None
        self.limit_tokens: int | None = None
        self.limit_requests: int | None = None
        #: what the service counted for others at the last answer (tokens, requests), when
        self._others = (0, 0, 0.0)
        self._last_seen_sent = -math.inf
        self.paused_until = 0.0
        self.late = 0.0  # the margin learnt from 429s
        self.refused_in_a_row = 0
        self._log: deque[Ticket] = deque()
        self._changed = asyncio.Event()
        #: the run's figures: calls admitted, 429s, and the longest pause
        self.admitted = 0
        self.rate_limited = 0
        self.paused = 0.0

    # -- admission ---------------------------------------------------------------------------

    async def admit(self, tokens: int, requests: int = 1) -> Ticket:
        """Wait until a call of ``requests`` requests and ``tokens`` tokens fits; count it."""
        while True:
            now = self.clock()
            wait = self.wait(now, tokens, requests)
            ahead = self.ahead()
            if wait <= ahead:  # sent once the room comes (now, or held until then)
                wall = self.wall()
                room = max(0.0, wait)
                sent, sent_wall = now + room, wall + room
                if not self.known:  # before the first answer: all let go at one moment
                    sent, sent_wall = self._together(now, wall)
                ticket = Ticket(
                    sent, tokens, requests, wall=sent_wall, admitted=now, admitted_wall=wall
                )
                HOLD.set(sent_wall if sent > now else None)
                self._log.append(ticket)
                self.in_flight += 1
                self.admitted += 1
                return ticket
            wait -= ahead
            self._changed.clear()
            timeout = None if math.isinf(wait) else wait
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def _together(self, now: float, wall: float) -> tuple[float, float]:
        """When the requests admitted before the first answer are let go (the pace's clock,
        and the wall clock): ``FIRST_TOGETHER`` after the first of them was admitted."""
        if self._first is None:
            self._first = (now + FIRST_TOGETHER, wall + FIRST_TOGETHER)
        return self._first

    def wait(self, now: float, tokens: int, requests: int = 1) -> float:
        """Seconds before a call of ``tokens`` and ``requests`` may be sent (``inf``: until an
        answer comes; 0: now)."""
        paused = max(0.0, self.paused_until - now)  # and the log must have room then
        if self.in_flight >= max(1, math.floor(self.allowed)):
            return math.inf
        if self.window is None:
            return paused
        keep = self.window + self.margin()
        while self._log and self.started(self._log[0]) + keep <= now:
            self._log.popleft()  # gone from the service's window
        log = sorted(((self.started(t) + keep, t) for t in self._log), key=lambda lt: lt[0])
        log = [(leaves, t) for leaves, t in log if leaves > now]
        others_tokens, others_requests, others_at = self._others
        if now >= others_at + keep:  # what others used then has left the window since
            others_tokens = others_requests = 0
        waits = [paused]
        sent = [leaves for leaves, _ in log]  # when each leaves the window
        for limit, need, others, sizes in (
            (self.limit_tokens, tokens, others_tokens, [t.tokens for _, t in log]),
            (self.limit_requests, requests, others_requests, [t.requests for _, t in log]),
        ):
            if limit is None:
                continue
            over = sum(sizes) + others + need - limit
            if over <= 0:
                continue
            if not sizes:  # a call alone over the limit goes (and learns)
                waits.append(others_at + keep - now if others else 0.0)
                continue
            for leaves, size in zip(sent, sizes, strict=True):  # the oldest leave first
                over -= size
                if over <= 0:
                    waits.append(leaves - now)
                    break
            else:  # only once all have left (and what others used)
                waits.append(max(sent[-1], others_at + keep if others else 0.0) - now)
        return max(waits)

    def started(self, ticket: Ticket) -> float:
        """When ``ticket``'s call started (not answered yet: when it may be sent, or its
        admission plus the longest recent delay if later)."""
        if ticket.start is not None:
            return ticket.start
        return max(ticket.sent, ticket.admitted + self.delays_most())

    def delays_most(self) -> float:
        return max(self.delays, default=0.0)

    def ahead(self) -> float:
        """How long before its room a request is admitted: the longest recent delay from
        admission to a call's start, at most a quarter of the window (0 before it is known)."""
        if self.window is None:
            return 0.0
        return min(self.delays_most(), AHEAD_MOST * self.window)

    def margin(self) -> float:
        """Seconds after the window before a request sent leaves the run's log."""
        window = self.window or 0.0
        return max(MARGIN_SECONDS, MARGIN_SHARE * window) + self.late

    # -- answers -----------------------------------------------------------------------------

    def settle(self, ticket: Ticket, seen: Seen | None, *, started: datetime | None = None) -> bool:
        """A call admitted with ``ticket`` ended, its last answer ``seen``, the call started
        at ``started`` (None: when admitted); True when it was refused for a rate limit and
        must go again."""
        now = self.clock()
        self.in_flight -= 1
        if started is not None:
            at = started.timestamp()
            ticket.start = ticket.sent + max(0.0, min(at - ticket.wall, now - ticket.sent))
            self.delays.append(max(0.0, min(at - ticket.admitted_wall, now - ticket.admitted)))
        first = not self.known
        self.known = True
        again = False
        if seen is not None and seen.limited:
            self.rate_limited += 1
            self.refused_in_a_row += 1
            with_time = seen.retry_after if seen.retry_after is not None else None
            pause = DEFAULT_RETRY_AFTER if with_time is None else max(0.0, with_time)
            self.paused_until = max(self.paused_until, now + pause)
            self.paused = max(self.paused, pause)
            if self.window is None:  # no stated window: fewer in flight is all there is
                self.allowed = max(1.0, self.allowed / 2)
            if ticket in self._log:  # refused: the service did not count it
                self._log.remove(ticket)
            if self.window is not None and with_time is not None:  # the log said room
                self.late = min(MARGIN_MOST * self.window, self.late + with_time)
            alone_over = seen.limit_tokens is not None and ticket.tokens > seen.limit_tokens
            again = (
                seen.retry
                and not alone_over
                and self.refused_in_a_row < max(GIVE_UP_AFTER, 2 * self.ceiling)
            )
        else:
            self.refused_in_a_row = 0
            self.late *= MARGIN_DECAY
            if first:
                self.allowed = float(self.ceiling)
            else:
                self.allowed = min(float(self.ceiling), self.allowed + 1 / self.allowed)
        if seen is not None and seen.states_limits:
            self._learn(ticket, seen)
        self._changed.set()
        return again

    def _learn(self, ticket: Ticket, seen: Seen) -> None:
        """The limits, the window and others' use, from an answer's headers (not others' use
        from a 429's: it came a moment before requests left the service's window, those of
        this run the log had let go too, and the pause it asked for covers them)."""
        self.limit_tokens = seen.limit_tokens
        self.limit_requests = seen.limit_requests
        resets = [r for r in (seen.reset_tokens, seen.reset_requests) if r]
        if resets:
            self.window = max(self.window or 0.0, *resets)
        at = self.started(ticket)
        if self.window is None or seen.limited or at < self._last_seen_sent:
            return  # an older answer than one already read
        self._last_seen_sent = at
        # what this run had sent in the window when the service counted this request
        # (a call not answered yet may have started as early as it was let go)
        mine = [t for t in self._log if at - self.window < _earliest(t) <= at]
        others_tokens = others_requests = 0
        if seen.limit_tokens is not None and seen.remaining_tokens is not None:
            used = seen.limit_tokens - seen.remaining_tokens
            others_tokens = max(0, used - sum(t.tokens for t in mine))
        if seen.limit_requests is not None and seen.remaining_requests is not None:
            used = seen.limit_requests - seen.remaining_requests
            others_requests = max(0, used - sum(t.requests for t in mine))
        self._others = (others_tokens, others_requests, at)


def _earliest(ticket: Ticket) -> float:
    """The earliest its call may have started: when it did, else when it was let go."""
    return ticket.start if ticket.start is not None else ticket.sent
