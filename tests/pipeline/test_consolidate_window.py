"""Phase 2 on a model with a small context window: the request asks for the output tokens
the window leaves after its input (up to 16,000), and only a window too small for even the
minimum answer fails the project with ``context_overflow``."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from memkiln.transforms.estimate import CONSOLIDATION_MAX_OUTPUT, consolidation_output_tokens
from tests.fake_openai import FakeOpenAI
from tests.pipeline.test_consolidate import (
    T0,
    add_session,
    folders,
    route_model,
    run_all,
    settings,
)


def consolidation_requests(fake: FakeOpenAI) -> list[dict]:
    return [
        r["body"]
        for r in fake.requests
        if ((r["body"].get("response_format") or {}).get("json_schema") or {}).get("name")
        == "consolidation"
    ]


def statuses(db: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("select status, last_reason from consolidation_jobs").fetchall()


@pytest.mark.parametrize("window", [12_000, 6_000])
def test_a_small_window_gets_a_consolidation_that_fits_it(
    tmp_path: Path, fake_openai: FakeOpenAI, window: int
) -> None:
    add_session(tmp_path / "archive", 1, remote="git@github.com:acme/shop.git",
                cwd="/src/shop", request="Fix the totals.", at=T0)  # fmt: skip
    fake_openai.route(route_model)
    s = settings(tmp_path, backend="openai", base_url=fake_openai.base_url, model="fake-model",
                 max_retries=0, context_window=window)  # fmt: skip
    run_all(s)
    [body] = consolidation_requests(fake_openai)
    asked = body["max_completion_tokens"]
    assert 2_000 <= asked < window <= CONSOLIDATION_MAX_OUTPUT
    assert statuses(s.db) == [("succeeded", None)]
    [folder] = folders(s.out)
    assert (folder / "MEMORY.md").is_file()


def test_output_tokens_are_what_the_window_leaves_and_none_below_the_minimum() -> None:
    assert consolidation_output_tokens(5_000, None) == CONSOLIDATION_MAX_OUTPUT
    assert consolidation_output_tokens(5_000, 128_000) == CONSOLIDATION_MAX_OUTPUT
    assert consolidation_output_tokens(5_000, 12_000) == 7_000
    assert consolidation_output_tokens(5_000, 7_000) == 2_000
    assert consolidation_output_tokens(5_000, 6_999) is None
