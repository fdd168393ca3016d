"""Segments: a session split at its first turn, topic switches, pauses and a turn limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from memkiln.transforms.segments import request_text_expr, segment_items

T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


def session(*rows: tuple[str, str, str | None, float], rid: str = "r1") -> pl.DataFrame:
    """Items from ``(item_type, role, text, minutes after T0)``, in order."""
    return pl.DataFrame(
        {
            "rollout_id": [rid] * len(rows),
            "seq": list(range(len(rows))),
            "ts": [T0 + timedelta(minutes=m) for *_, m in rows],
            "item_type": [r[0] for r in rows],
            "role": [r[1] for r in rows],
            "text": [r[2] for r in rows],
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC")},
    )


def user(text: str, at: float) -> tuple[str, str, str | None, float]:
    return ("message", "user", text, at)


def answer(text: str, at: float) -> tuple[str, str, str | None, float]:
    return ("message", "assistant", text, at)


def call(at: float) -> tuple[str, str, str | None, float]:
    return ("function_call", None, '{"command": "pytest"}', at)  # type: ignore[return-value]


def expected(rows: list[tuple[int, int, int, float, str, int]], rid: str = "r1") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rollout_id": [rid] * len(rows),
            "segment_index": [r[0] for r in rows],
            "first_seq": [r[1] for r in rows],
            "last_seq": [r[2] for r in rows],
            "started_at": [T0 + timedelta(minutes=r[3]) for r in rows],
            "boundary": [r[4] for r in rows],
            "turns": [r[5] for r in rows],
        },
        schema={
            "rollout_id": pl.String,
            "segment_index": pl.Int32,
            "first_seq": pl.Int32,
            "last_seq": pl.Int32,
            "started_at": pl.Datetime("us", "UTC"),
            "boundary": pl.String,
            "turns": pl.Int32,
        },
    )


def test_a_session_splits_at_a_topic_switch_a_pause_and_the_turn_limit() -> None:
    items = session(
        user("Fix the flaky login test.", 0),  # 0: start
        call(1),
        answer("Fixed.", 2),
        user("thanks, works", 3),
        user("Now let's add a logout button.", 4),  # 4: topic switch
        answer("Added.", 5),
        user("Make it red.", 50),  # 6: a 45-minute pause
        answer("Done.", 51),
        user("And bigger.", 52),
        user("And round.", 53),  # 9: the third turn since the pause, limit 2
        answer("Done.", 54),
    )
    assert_frame_equal(
        segment_items(items, max_turns=2, gap_minutes=30),
        expected(
            [
                (0, 0, 3, 0, "start", 2),
                (1, 4, 5, 4, "topic_switch", 1),
                (2, 6, 8, 50, "time_gap", 2),
                (3, 9, 10, 53, "turn_limit", 1),
            ]
        ),
    )


@pytest.mark.parametrize(
    "opening",
    [
        "Now let's move on to the exporter.",
        "OK, switching to the CLI now.",
        "Next task: the README.",
        "Great. Now add pagination to the list.",
        "Moving on, the docs need a section.",
    ],
)
def test_explicit_switches_of_topic_start_a_segment(opening: str) -> None:
    items = session(user("Fix the bug.", 0), answer("Fixed.", 1), user(opening, 2))
    assert segment_items(items)["boundary"].to_list() == ["start", "topic_switch"]


@pytest.mark.parametrize(
    "follow_up",
    ["Now it fails with a different error.", "Can you also check the tests?", "yes please"],
)
def test_a_follow_up_on_the_same_task_is_not_a_switch(follow_up: str) -> None:
    items = session(user("Fix the bug.", 0), answer("Fixed.", 1), user(follow_up, 2))
    assert segment_items(items)["boundary"].to_list() == ["start"]


def test_context_only_messages_and_bare_slash_commands_start_no_turn() -> None:
    items = session(
        user("<environment_context>\n<cwd>/repo</cwd>\n</environment_context>", 0),
        user("/model opus", 1),
        user("Explain the build.", 2),
        answer("It uses make.", 3),
    )
    # items before the first turn belong to the first segment
    assert_frame_equal(segment_items(items), expected([(0, 0, 3, 2, "start", 1)]))


def test_a_session_without_a_turn_is_one_start_segment_and_sessions_stay_apart() -> None:
    quiet = session(answer("Hello.", 0), rid="a")
    busy = session(user("Fix it.", 0), answer("Fixed.", 1), rid="b")
    out = segment_items(pl.concat([busy, quiet]))
    assert_frame_equal(
        out,
        pl.concat(
            [expected([(0, 0, 0, 0, "start", 0)], "a"), expected([(0, 0, 1, 0, "start", 1)], "b")]
        ),
    )


def test_request_text_is_the_users_words_only() -> None:
    texts = pl.DataFrame(
        {
            "text": [
                "<environment_context><cwd>/x</cwd></environment_context>\nFix it",
                "<environment_context><cwd>/x</cwd></environment_context>",
                "/clear",
                "/review the parser please",
                "/usr/bin/env is missing\non this box",
            ]
        }
    )
    assert texts.select(request_text_expr())["text"].to_list() == [
        "Fix it",
        None,
        None,
        None,
        "/usr/bin/env is missing\non this box",
    ]
