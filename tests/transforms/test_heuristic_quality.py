"""The heuristic's evidence, tasks and outcomes, from a few inline items (no store)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest

from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.heuristic import RolloutFacts, extract_heuristic
from memkiln.transforms.normalize import ITEM_COLUMNS
from memkiln.transforms.stage_one_answer import StageOneOutput

T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


class Session:
    """A Codex-like session built item by item, five seconds apart."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def _add(self, **fields: Any) -> Session:
        n = len(self.rows)
        row = {
            "rollout_id": "r1", "seq": n, "fid": 1, "line_no": n + 1, "part_idx": 0,
            "ts": T0 + timedelta(seconds=5 * n), "record_type": "response_item",
            "item_type": None, "role": None, "name": None, "call_id": None, "text": None,
            "parts": None, "payload_json": "{}", "omitted_bytes": 0,
        }  # fmt: skip
        row.update(fields)
        self.rows.append(row)
        return self

    def user(self, *parts: str) -> Session:
        return self._add(
            item_type="message",
            role="user",
            parts=[{"type": "input_text", "text": p} for p in parts],
            text="\n".join(parts),
        )

    def answer(self, text: str) -> Session:
        return self._add(
            item_type="message",
            role="assistant",
            parts=[{"type": "output_text", "text": text}],
            text=text,
        )

    def shell(self, command: str, exit_code: int | None, output: str = "") -> Session:
        """A shell call; its output states the exit code unless it is None (Claude Code)."""
        call_id = f"c{len(self.rows)}"
        args = json.dumps({"command": ["bash", "-lc", command]})
        self._add(item_type="function_call", name="shell", call_id=call_id, text=args)
        stated = "" if exit_code is None else f"Exit code: {exit_code}\nOutput:\n"
        return self._add(item_type="function_call_output", call_id=call_id, text=stated + output)

    def call_only(self, command: str) -> Session:
        """A shell call that never returned (the session stopped while it ran)."""
        args = json.dumps({"command": ["bash", "-lc", command]})
        return self._add(
            item_type="function_call", name="shell", call_id=f"c{len(self.rows)}", text=args
        )

    def extract(self) -> StageOneOutput:
        schema = ITEM_COLUMNS | {"rollout_id": pl.String, "seq": pl.Int32}
        frame = pl.DataFrame(self.rows, schema=schema)
        kept = filter_memory_items(frame.lazy()).collect()
        return extract_heuristic(kept, RolloutFacts("r1", "/home/dev/shop", T0))


def tasks(raw: str) -> list[tuple[str, str]]:
    return re.findall(r"(?m)^### Task \d+: (.*)\ntask_outcome: (\S+)$", raw)


def test_the_title_is_the_first_genuine_request_behind_injected_context() -> None:
    out = (
        Session()
        .user(
            "<user_instructions>\n\n# Guidelines\n- Always use tabs.\n</user_instructions>",
            "<environment_context>\n<cwd>/home/dev/shop</cwd>\n</environment_context>",
        )
        .user(
            "# Context from my IDE setup:\n\n## Open tabs:\n- a.ts: a.ts\n\n"
            "## My request for Codex:\nWhy is the team page slow? Make it faster."
        )
        .shell("npm run build", 0, "built")
        .answer("The page loaded every team; it now loads one. The build passes.")
        .extract()
    )
    assert tasks(out.raw_memory) == [("Why is the team page slow? Make it faster.", "success")]
    assert out.rollout_summary.startswith("# Why is the team page slow? Make it faster.\n")
    for marker in ("<user_instructions>", "Always use tabs", "# Context from", "<environment"):
        assert marker not in out.raw_memory and marker not in out.rollout_summary


def test_preferences_are_statements_the_user_wrote_without_list_markers() -> None:
    out = (
        Session()
        .user(
            "Set up the release script.\n"
            "- Always use pnpm, never npm.\n"
            "* Don't touch the generated files.\n"
            "Should we always use tabs?\n"
            "Can you never push to main\n"
            "Never do this stupid thing again.\n"
            "Also, I don't see the release notes in the output."
        )
        .shell("pnpm run build", 0)
        .answer("Added scripts/release.sh.")
        .extract()
    )
    prefs = out.raw_memory.split("Preference signals:\n", 1)[1].split("\n\n", 1)[0]
    assert prefs.splitlines() == [
        "- Always use pnpm, never npm.",
        "- Don't touch the generated files.",
    ]
    assert not re.search(r"(?m)^\s*[-*] [-*] ", out.raw_memory + out.rollout_summary)


def test_each_segment_is_a_task_with_its_own_outcome() -> None:
    out = (
        Session()
        .user("Fix the flaky login test.")
        .shell("pytest -q tests/test_login.py", 1, "1 failed")
        .shell("pytest -q tests/test_login.py", 0, "4 passed")
        .answer("The test waited on a real clock; it uses a fake one now.")
        .user("Now let's add a logout button to the header.")
        .shell("git add -A", 0)
        .answer("Added the button.")
        .user("Still broken: the button does nothing.")
        .extract()
    )
    assert tasks(out.raw_memory) == [
        ("Fix the flaky login test.", "success"),
        ("Add a logout button to the header.", "fail"),  # a topic title: no filler
    ]
    assert "Outcome: success, `pytest -q tests/test_login.py` passed after failing" in (
        out.rollout_summary
    )
    assert 'Outcome: fail, the user said: "Still broken: the button does nothing."' in (
        out.rollout_summary
    )
    assert "task_outcome: fail\ncwd:" in out.raw_memory  # the session: its worst judged task


@pytest.mark.parametrize(
    ("session", "outcome", "why"),
    [
        (
            Session()
            .user("Add a retry to the loader.")
            .shell("pytest -q", 1, "1 failed")
            .answer("Added it.")
            .user("works, thanks"),
            "success",
            'the user said: "works, thanks"',
        ),
        (
            Session()
            .user("Add a retry to the loader.")
            .shell("pytest -q", 0, "3 passed")
            .answer("Added it.")
            .user("revert that"),
            "fail",
            'the user said: "revert that"',
        ),
        (
            Session()
            .user("Make the build green.")
            .shell("cargo build", 0)
            .shell("cargo test", 101, "test result: FAILED")
            .answer("Two tests remain red."),
            "partial",
            "the last check, `cargo test`, failed",
        ),
        (
            Session()
            .user("Find out why the upload hangs.")
            .shell("curl -sS localhost:8080/upload", 7, "curl: (7) Failed to connect")
            .answer("I could not reach the server, so the hang is not reproduced."),
            "partial",
            "the agent said it could not finish",
        ),
        (
            Session()
            .user("Rename the config key.")
            .shell("sed -i s/old/new/ config.toml", 0)
            .answer("The key in config.toml has its new name."),
            # the agent's word and an exit 0 are not a verification
            "uncertain",
            "nothing was verified or confirmed",
        ),
        (
            Session()
            .user("Commit the fix.")
            .shell("git commit -am 'Fix clean'", None, "[main 22c57db] Fix clean")
            .answer("Committed as 22c57db."),
            "uncertain",
            "nothing was verified or confirmed",
        ),
        (
            Session()
            .user("Tag the release.")
            .shell("git tag v1.2", None, "")
            .answer("Tagged it v1.2 for you."),
            "uncertain",
            "nothing was verified or confirmed",
        ),
        (
            Session()
            .user("Run the CI task locally.")
            .shell("mise run test:ci", 1, "FAIL pkg/clean")
            .shell("mise run test:ci", 0, "ok pkg/clean")
            .answer("CI is green locally."),
            "success",
            "`mise run test:ci` passed after failing",
        ),
    ],
)
def test_outcomes_come_from_signals(session: Session, outcome: str, why: str) -> None:
    out = session.extract()
    assert f"Outcome: {outcome}, {why}\n" in out.rollout_summary


def test_an_answer_with_nothing_done_or_stated_is_the_no_op_answer() -> None:
    out = (
        Session()
        .user("Explain how the tax rounding works in this project, in detail please.")
        .answer(
            "Rounding happens per line, half up, to the cent, before the totals are "
            "summed; the invoice total can therefore differ from a total rounded once. "
            "The rule lives in the billing module and is covered by its unit tests."
        )
        .extract()
    )
    assert out.is_noop


def test_a_session_that_stopped_before_its_last_call_returned_is_the_no_op_answer() -> None:
    out = Session().user("Rebuild the search index for the shop.").call_only("make index").extract()
    assert out.is_noop


def test_the_next_tasks_opening_is_feedback_only_when_it_is_not_the_switch_itself() -> None:
    def first_task(opening: str, exit_code: int) -> tuple[str, str]:
        out = (
            Session()
            .user("Add a retry to the loader.")
            .shell("pytest -q", exit_code, "3 passed" if exit_code == 0 else "1 failed")
            .answer("Added a retry.")
            .user(opening)
            .shell("git status", 0)
            .answer("Looking at it.")
            .extract()
        )
        assert len(tasks(out.raw_memory)) == 2  # the opening is a switch: two tasks
        return tasks(out.raw_memory)[0]

    # "broken" is about the next task, not this one
    assert first_task("Now let's fix the broken header.", 0)[1] == "success"
    # "Great." before the switch is this task's feedback, over its failed check
    assert first_task("Great. Now let's fix the header.", 1)[1] == "success"


def test_a_title_skips_a_greeting_and_heading_markers() -> None:
    out = (
        Session()
        .user("hello")
        .user("## Task\n\n- Fix the login redirect loop on Safari.\n- Keep the old URLs.")
        .shell("npm test", 0, "ok")
        .answer("Fixed the redirect.")
        .extract()
    )
    assert tasks(out.raw_memory)[0][0] == "Fix the login redirect loop on Safari."
