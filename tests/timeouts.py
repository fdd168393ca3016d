"""Per-test time limits (pytest-timeout): a hanging test fails with its name.

Every test gets ``timeout`` from pyproject.toml (300 s, far above the slowest test on a
loaded 2-core machine). Tests that legitimately run long get more: the corpus sweeps
(marker ``corpus``) grow with the shared corpus, so they get ``LONG_TIMEOUT_S``. A test can
still set its own limit with ``@pytest.mark.timeout(seconds)``.
"""

from __future__ import annotations

import pytest

LONG_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("corpus") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
