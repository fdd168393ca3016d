"""Shared fixtures: the bundled sample archive, the shared corpus, quiet offline Prefect."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_ARCHIVE = REPO / "data" / "sample-archive"
SHARED_CORPUS = REPO.parent / "shared" / "corpus"

pytest_plugins = ["tests.fake_openai", "tests.timeouts"]


@pytest.fixture(scope="session", autouse=True)
def _offline_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test process gets its own Prefect home and no telemetry."""
    home = tmp_path_factory.mktemp("prefect-home")
    env = {
        "PREFECT_HOME": str(home),
        "MEMKILN_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def sample_archive(tmp_path: Path) -> Path:
    """A private copy of the bundled sample archive."""
    dest = tmp_path / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, dest)
    return dest


@pytest.fixture(scope="session")
def rollout_corpus() -> Path:
    """The shared corpus of real rollouts; tests that sweep it skip when it is absent."""
    path = SHARED_CORPUS / "rollouts"
    if not path.is_dir():
        pytest.skip(f"shared corpus not found at {path} (only present beside a developer checkout)")
    return path
