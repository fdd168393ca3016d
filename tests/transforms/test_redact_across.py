"""A token cut in two by the end of one tool output and the start of the next (issue 29,
point 4): each output redacted alone leaves a half; across the join, neither half is left, and
ordinary consecutive outputs stay as they are."""

from __future__ import annotations

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import REDACTED, RuleSet, redact_series
from memkiln.transforms.redact_across import HIT_ID, redact_across, redact_across_frame
from tests.transforms.test_redact import FIXTURES, ORDINARY

GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SK = "sk-proj-" + "Zx81Qw7Er6Ty5Ui4Op3As2Df1Gh0Jk9Lm8Nb7Vc6Xz5Aq4Sw3De2"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _alone(texts: list[str], rules: RuleSet) -> list[str]:
    out = redact_series(pl.Series("text", texts, dtype=pl.String), rules=rules, unescape=False)
    return [str(t) for t in out.to_list()]


def _left(token: str, texts: list[str | None]) -> list[str]:
    """Runs of 4 characters of ``token`` still in ``texts``."""
    joined = "\x00".join(t or "" for t in texts)
    return [token[i : i + 4] for i in range(len(token) - 3) if token[i : i + 4] in joined]


@pytest.mark.parametrize("token", [GHP, SK])
@pytest.mark.parametrize("cut", [6, 12, 20, 30, 36])
def test_no_half_of_a_token_cut_by_two_outputs_is_left(
    token: str, cut: int, rules: RuleSet
) -> None:
    outputs = [f"$ cat token.txt\n{token[:cut]}", f"{token[cut:]}\n$ echo done"]
    alone = _alone(outputs, rules)
    assert _left(token, alone)  # each output redacted alone: a half is left
    across, n = redact_across(alone, ["s", "s"], rules)
    assert n == 1
    assert _left(token, across) == []
    assert across[0] is not None and across[0].startswith("$ cat token.txt\n")
    assert across[1] is not None and across[1].endswith(f"{REDACTED}\n$ echo done")


def test_outputs_of_two_sessions_are_not_joined(rules: RuleSet) -> None:
    alone = _alone([f"x {GHP[:20]}", f"{GHP[20:]} y"], rules)
    assert redact_across(alone, ["a", "b"], rules) == (alone, 0)


def test_ordinary_consecutive_outputs_stay_as_they_are(rules: RuleSet) -> None:
    rows = (FIXTURES / "benign_strings.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [str(t) for t in ORDINARY] + [r.split("\t")[-1] for r in rows if r.strip()]
    alone = _alone(texts, rules)
    assert alone == texts
    assert redact_across(alone, ["s"] * len(alone), rules) == (alone, 0)
    # and a word after an output that ends with a redacted token is a word
    done = _alone([f"token {GHP}", "Done: 3 files"], rules)
    assert done[0].endswith(REDACTED)
    assert redact_across(done, ["s", "s"], rules) == (done, 0)


def test_the_items_of_a_batch_are_joined_output_to_output(rules: RuleSet) -> None:
    items = pl.DataFrame(
        {
            "fid": [1, 1, 1, 2, 1],
            "line_no": [3, 1, 2, 1, 4],
            "item_type": [
                "function_call_output", "message", "function_call_output",
                "function_call_output", "function_call",
            ],
            "text": [f"{GHP[16:]} ok", "hello", f"run: {GHP[:16]}", "other", "ls"],
        }
    )  # fmt: skip
    redacted, hits = redact_across_frame(items, rules=rules)
    assert hits == {HIT_ID: 1}
    assert redacted["text"].to_list() == [
        f"{REDACTED} ok",
        "hello",
        f"run: {REDACTED}",
        "other",
        "ls",
    ]
    assert redact_across_frame(items.filter(pl.col("fid") == 2), rules=rules)[1] == {}
