"""The decisions of extraction's send loop (``memkiln.pipeline.extract_send``), kept apart from
it: what the budget lets a run send, when failures of the service in a row stop it, and how
much of its sessions' items a run may hold at once.

All three are small records of a run's state with the rules that read them; neither does I/O,
waits or knows where a request goes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memkiln.transforms.selection import run_wide_failure_limit
from memkiln.transforms.states import RETRY_NOW_REASONS, Outcome


def dollars(amount: float) -> str:
    """A budget as the user gave it, to the millionth of a dollar, with at least the cents
    (``$2.00``, ``$0.027259``): rounded to the cent, a $0.027 budget read "$0.03"."""
    whole, _, cents = f"{amount:,.6f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


@dataclass
class Budget:
    """A hard cap on a run's spend: each request's worst-case cost is reserved before it is
    sent and released when it answers, when what it cost is added to ``spent``.

    ``limit`` None: no budget (every request fits). ``spent`` starts at what the same
    invocation spent before this phase."""

    limit: float | None
    spent: float = 0.0
    #: the reserved cost of each request in flight, by session
    in_flight: dict[str, float] = field(default_factory=dict)
    #: the most that was reserved at once
    most_reserved: float = 0.0

    def reserve(self, key: str, cost: float) -> bool:
        """Reserve ``cost`` for ``key`` when it fits beside what was spent and what is
        reserved; False (nothing reserved) when it does not fit now."""
        if self.limit is None:
            return True
        reserved = math.fsum(self.in_flight.values())
        if self.spent + reserved + cost > self.limit:
            return False
        self.in_flight[key] = cost
        self.most_reserved = max(self.most_reserved, reserved + cost)
        return True

    def settle(self, key: str, cost: float) -> None:
        """``key`` answered (or failed) having cost ``cost``: its reservation is released."""
        self.in_flight.pop(key, None)
        self.spent += cost

    def release(self, key: str) -> None:
        """``key`` ended before its cost was known: its reservation is released."""
        self.in_flight.pop(key, None)

    def reached(self, cost: float) -> str:
        """Why the run stops sending: the next request (``cost`` at most) does not fit even
        with nothing in flight."""
        assert self.limit is not None, "a run without a budget never reaches it"
        return (
            f"budget of {dollars(self.limit)} reached: ${self.spent:,.4f} spent, "
            f"${self.limit - self.spent:,.4f} left, the next request ~${cost:,.4f} at most"
        )


@dataclass
class Holding:
    """The characters of kept items held by a run's sessions from the start of their group's
    preparation until their request ends (read, rendered, then in flight: a chunked session's
    request holds its rendered items whole until its merge answers), by session.

    A group is prepared only when it fits within ``bound`` beside what is held, or when
    nothing is: however many requests may be in flight, what they hold stays bounded
    (``HELD_IN_FLIGHT_CHARS``)."""

    bound: int
    held: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.held.values())

    def fits(self, sizes: dict[str, int]) -> bool:
        """Whether sessions holding ``sizes`` may be taken on now."""
        return not self.held or self.total + sum(sizes.values()) <= self.bound

    def take(self, sizes: dict[str, int]) -> None:
        self.held.update(sizes)

    def let_go(self, key: str) -> None:
        """``key``'s request ended (or will not be sent): what it held is free."""
        self.held.pop(key, None)


@dataclass
class Streak:
    """Failures of the service in a row (endpoint down, key refused, every request
    rate-limited, 5xx or timing out). At ``limit`` the run stops sending and leaves the rest
    pending; the sessions of the streak get back the attempts it used (``ids``)."""

    limit: int
    ids: list[str] = field(default_factory=list)

    @classmethod
    def for_concurrency(cls, concurrency: int) -> Streak:
        return cls(run_wide_failure_limit(concurrency))

    def note(self, result: Outcome, *, stopped: bool) -> str | None:
        """Count ``result`` (a sent request's failure of the service extends the streak, any
        other outcome ends it, unless the run already stopped); the reason to stop when the
        streak reaches the limit in a run not yet stopped, else None."""
        if result.sent and result.reason in RETRY_NOW_REASONS:
            self.ids.append(result.rollout_id)
        elif not stopped:
            self.ids.clear()
        if stopped or len(self.ids) < self.limit:
            return None
        return (
            f"stopped after {len(self.ids)} requests in a row failed with "
            f"{result.reason} (endpoint, key or model unusable; last error: "
            f"{(result.detail or '')[:160]})"
        )
