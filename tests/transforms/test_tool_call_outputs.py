"""A call's outputs are paired as one, whether it has one output or several.

``build_tool_calls`` takes a call's single output as it is and joins the texts of a call with
several; both must give what one group-by over every output gives (the definition).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal

from memkiln.transforms.tool_calls import _outputs_per_call, build_tool_calls

T0 = datetime(2026, 1, 1, 10, tzinfo=UTC)


def _definition(outputs: pl.LazyFrame) -> pl.LazyFrame:
    return outputs.group_by("rollout_id", "call_id").agg(
        out_ts=pl.col("ts").min(),
        out_text=pl.col("text").sort_by("seq").str.join("\n"),
        is_error=pl.col("is_error").fill_null(False).any(),
    )


def _outputs() -> pl.DataFrame:
    rows = [
        # rollout, call, seq, seconds, text, is_error
        ("r1", "c1", 2, 2, "Exit code: 0\nok", None),  # one output
        ("r1", "c2", 4, 4, None, None),  # one output without text
        ("r1", "c3", 6, 6, "part two", False),  # two outputs, out of order
        ("r1", "c3", 5, 5, "Exit code: 1\npart one", True),
        ("r1", "c4", 8, 8, None, None),  # two outputs, one without text
        ("r1", "c4", 9, 9, "tail", None),
        ("r2", "c1", 3, 3, "same call id, other rollout", None),
        (None, "c9", 1, 1, "no rollout", True),
    ]
    return pl.DataFrame(
        {
            "rollout_id": [r[0] for r in rows],
            "call_id": [r[1] for r in rows],
            "seq": pl.Series([r[2] for r in rows], dtype=pl.Int32),
            "ts": [T0 + timedelta(seconds=r[3]) for r in rows],
            "text": pl.Series([r[4] for r in rows], dtype=pl.String),
            "is_error": pl.Series([r[5] for r in rows], dtype=pl.Boolean),
        }
    )


def test_outputs_per_call_equal_one_group_by_over_every_output() -> None:
    outputs = _outputs().lazy()
    keys = ["rollout_id", "call_id"]
    got = _outputs_per_call(outputs).collect().sort(keys, nulls_last=True)
    expected = _definition(outputs).collect().sort(keys, nulls_last=True)
    assert_frame_equal(got, expected)
    texts = dict(zip(got["call_id"], got["out_text"], strict=True))
    assert texts["c3"] == "Exit code: 1\npart one\npart two"
    assert texts["c2"] == ""  # as the join of no text gives


def test_a_call_with_two_outputs_is_paired_with_both() -> None:
    out = _outputs()
    items = pl.concat(
        [
            out.select(
                "rollout_id",
                "seq",
                fid=pl.lit(1, dtype=pl.Int64),
                line_no=pl.col("seq"),
                ts="ts",
                item_type=pl.lit("function_call_output"),
                name=pl.lit(None, dtype=pl.String),
                call_id="call_id",
                text="text",
                payload_json=pl.when(pl.col("is_error"))
                .then(pl.lit('{"is_error": true}'))
                .otherwise(pl.lit("{}")),
            ),
            pl.DataFrame(
                {
                    "rollout_id": ["r1", "r1"],
                    "seq": pl.Series([1, 3], dtype=pl.Int32),
                    "fid": pl.Series([1, 1], dtype=pl.Int64),
                    "line_no": pl.Series([100, 101], dtype=pl.Int32),
                    "ts": [T0, T0],
                    "item_type": ["function_call", "function_call"],
                    "name": ["shell", "shell"],
                    "call_id": ["c3", "c1"],
                    "text": ['{"command": "make"}', '{"command": "ls"}'],
                    "payload_json": ["{}", "{}"],
                }
            ),
        ],
        how="vertical_relaxed",
    )
    errors = pl.DataFrame(
        schema={"fid": pl.Int64, "line_no": pl.Int32, "is_error": pl.Boolean}
    ).lazy()
    calls = build_tool_calls(items.lazy(), result_errors=errors).collect()
    by_id = {row["call_id"]: row for row in calls.iter_rows(named=True)}
    assert by_id["c3"]["exit_code"] == 1 and by_id["c3"]["failed"]
    assert by_id["c3"]["output_chars"] == len("Exit code: 1\npart one\npart two")
    assert by_id["c1"]["exit_code"] == 0 and not by_id["c1"]["failed"]
