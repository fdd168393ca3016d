"""A hanging test fails with its name instead of running CI out of time."""

from __future__ import annotations

import pytest

from tests.timeouts import LONG_TIMEOUT_S


def test_every_test_has_a_time_limit(pytestconfig: pytest.Config) -> None:
    assert float(pytestconfig.getini("timeout")) == 300


@pytest.mark.corpus
def test_corpus_sweeps_get_the_long_limit(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    assert marker.args == (LONG_TIMEOUT_S,)
