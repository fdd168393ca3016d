"""The send loop's decisions: the budget's reservations, the streak of service failures and
what the sessions being prepared or in flight hold."""

from __future__ import annotations

import pytest

from memkiln.transforms.sending import Budget, Holding, Streak
from memkiln.transforms.states import FailureReason, Outcome, OutcomeKind


def test_no_budget_admits_every_request_and_reserves_nothing() -> None:
    budget = Budget(None)
    assert all(budget.reserve(str(n), 1e9) for n in range(3))
    assert budget.in_flight == {}


def test_a_request_is_reserved_only_when_it_fits_beside_spend_and_what_is_in_flight() -> None:
    budget = Budget(1.0, spent=0.25)
    assert budget.reserve("a", 0.5)
    assert not budget.reserve("b", 0.5)  # 0.25 + 0.5 + 0.5 > 1.0
    assert budget.in_flight == {"a": 0.5}
    budget.settle("a", 0.1)  # answered for less than its worst case
    assert budget.spent == pytest.approx(0.35)
    assert budget.reserve("b", 0.5)
    assert budget.most_reserved == pytest.approx(0.5)


def test_a_request_exactly_at_the_limit_fits() -> None:
    assert Budget(1.0, spent=0.5).reserve("a", 0.5)


def test_the_reason_to_stop_names_spend_left_and_the_next_request() -> None:
    budget = Budget(2.0, spent=1.5)
    why = budget.reached(0.75)
    assert "budget of $2.00 reached" in why
    assert "$1.5000 spent" in why and "$0.5000 left" in why and "~$0.7500" in why
    # a budget under a cent's rounding is named as given, not rounded to the cent
    assert "budget of $0.027259 reached" in Budget(0.0272592, spent=0.02).reached(0.0069)


def _failed(rid: str, reason: str, *, sent: bool = True) -> Outcome:
    return Outcome(rid, OutcomeKind.FAILED, reason=reason, detail="boom", sent=sent)


def test_a_streak_of_service_failures_stops_at_its_limit_and_keeps_its_sessions() -> None:
    streak = Streak(3)
    assert streak.note(_failed("a", FailureReason.SERVER_ERROR), stopped=False) is None
    assert streak.note(_failed("b", FailureReason.TIMEOUT), stopped=False) is None
    why = streak.note(_failed("c", FailureReason.CONNECTION_ERROR), stopped=False)
    assert why is not None and "3 requests in a row failed with connection_error" in why
    assert streak.ids == ["a", "b", "c"]


def test_any_other_outcome_ends_the_streak() -> None:
    streak = Streak(2)
    streak.note(_failed("a", FailureReason.SERVER_ERROR), stopped=False)
    streak.note(Outcome("b", OutcomeKind.SUCCEEDED, sent=True), stopped=False)
    assert streak.ids == []
    # a failure of the answer, not of the service, ends it too
    streak.note(_failed("c", FailureReason.SERVER_ERROR), stopped=False)
    streak.note(_failed("d", FailureReason.INVALID_JSON), stopped=False)
    assert streak.ids == []


def test_a_request_never_sent_neither_extends_nor_stops_a_stopped_run() -> None:
    streak = Streak(1)
    assert streak.note(_failed("a", FailureReason.SERVER_ERROR, sent=False), stopped=False) is None
    assert streak.ids == []
    # once the run stopped, failures still count (their attempts are given back) but no
    # second reason is given, and nothing clears the list
    assert streak.note(_failed("b", FailureReason.SERVER_ERROR), stopped=True) is None
    streak.note(Outcome("c", OutcomeKind.SUCCEEDED, sent=True), stopped=True)
    assert streak.ids == ["b"]


def test_the_limit_follows_concurrency() -> None:
    assert Streak.for_concurrency(1).limit == 8
    assert Streak.for_concurrency(16).limit == 32


def test_the_window_check_names_the_first_request_over_it() -> None:
    from memkiln.transforms.prompts import build_stage_one_input, window_shortfall

    small = build_stage_one_input(
        rollout_path="a.jsonl", rollout_cwd=None, rollout_contents="hi", context_window=None
    )
    big = build_stage_one_input(
        rollout_path="b.jsonl",
        rollout_cwd=None,
        rollout_contents="word " * 3000,
        context_window=None,
    )
    assert window_shortfall((small, big), reserve=100, window=None) is None
    assert window_shortfall((small,), reserve=100, window=100_000) is None
    need = big.system_tokens + big.user_tokens + 100
    assert window_shortfall((small, big), reserve=100, window=need - 1) == (
        f"{need} tokens needed, window {need - 1}"
    )
    assert window_shortfall((big,), reserve=100, window=need) is None


def test_sessions_are_taken_on_while_what_is_held_fits_and_alone_when_nothing_is() -> None:
    holding = Holding(bound=100)
    assert holding.fits({"a": 500})  # larger than the bound: taken on when nothing is held
    holding.take({"a": 60, "b": 30})
    assert holding.total == 90
    assert holding.fits({"c": 10}) and not holding.fits({"c": 11})
    assert not holding.fits({"c": 5, "d": 6})  # a group's sessions together
    holding.let_go("a")
    assert holding.fits({"c": 70})
    holding.let_go("a")  # twice, or never taken: nothing changes
    holding.let_go("z")
    assert holding.held == {"b": 30}
