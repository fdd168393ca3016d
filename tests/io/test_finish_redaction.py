"""The store redacts every text of a stage-one outcome itself: raw secrets handed to
``finish_many`` in every output field, a failure's detail and its attempt never reach a table.

The end-to-end secret tests hand the store answers already redacted upstream, so a store that
skipped one field passed them all; here the store is the only line of defence.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from memkiln.io.jobs import claim_many, finish_many
from memkiln.io.rules import load_rules
from memkiln.io.store import fetch_pl, open_store
from memkiln.transforms.redact import REDACTED
from memkiln.transforms.stage_one_answer import StageOneOutput
from memkiln.transforms.states import Finished, Outcome

#: Secrets of three shapes the rules know (built at run time: no key sits in the source).
SECRETS = (
    "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    "AKIA" + "QWERTYUIOPASDFGH",
    "sk-proj-" + "Zx9" * 16,
)
TABLES = ("stage1_outputs", "stage1_jobs", "stage1_attempts")
AT = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("secret", SECRETS)
def test_every_output_field_error_and_attempt_is_redacted_by_the_store(secret: str) -> None:
    con = open_store(":memory:")
    todo = pl.DataFrame(
        {"rollout_id": ["s-ok", "s-failed"], "updated_at": [AT, AT]},
        schema={"rollout_id": pl.String, "updated_at": pl.Datetime("us", "UTC")},
    )
    attempts = claim_many(con, todo, run_id="r1", lease_seconds=600)
    output = StageOneOutput(
        raw_memory=f"task: deploy\nthe key is {secret}",
        rollout_summary=f"used the token {secret} to push",
        rollout_slug=f"push with {secret}",
    )
    done = [
        Finished(
            Outcome("s-ok", "succeeded", output=output, input_hash="h1", started_at=AT),
            watermark=AT,
            attempt=attempts["s-ok"],
        ),
        Finished(
            Outcome(
                "s-failed",
                "failed",
                reason="bad_output",
                detail=f"the answer held {secret} and no JSON",
                input_hash="h2",
                started_at=AT,
            ),
            watermark=AT,
            attempt=attempts["s-failed"],
        ),
    ]
    finish_many(
        con, done, run_id="r1", backend="openai", model="m", prompt_version="p",
        retry_delay=timedelta(hours=1), rules=load_rules(),
    )  # fmt: skip

    outputs = fetch_pl(con, "select raw_memory, rollout_summary, rollout_slug from stage1_outputs")
    jobs = fetch_pl(con, "select last_reason, last_error from stage1_jobs")
    history = fetch_pl(con, "select reason, detail from stage1_attempts")
    # every field was written (the test would prove nothing of a row that is not there)
    assert outputs.height == 1 and history.height == 2
    assert all(REDACTED in outputs[c][0] for c in outputs.columns)
    assert REDACTED in jobs["last_error"].drop_nulls()[0]
    assert REDACTED in history["detail"].drop_nulls()[0]
    for table in TABLES:
        dump = fetch_pl(con, f"select * from {table}").write_csv()
        assert secret not in dump, table
    con.close()
