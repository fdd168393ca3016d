"""Shared fixtures: the bundled sample archive, the shared corpus, quiet offline Prefect."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_ARCHIVE = REPO / "data" / "sample-archive"
SHARED_CORPUS = REPO.parent / "shared" / "corpus"

pytest_plugins = ["tests.fake_openai", "tests.timeouts", "tests.prefect_server"]


#: Builds Prefect's database with every migration applied (what the first flow run of a
#: fresh Prefect home does, about 20 s of CPU).
MIGRATE = (
    "import asyncio\n"
    "from prefect.server.database import provide_database_interface\n"
    "asyncio.run(provide_database_interface().create_db())\n"
)


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path | None:
    """The folder ``name`` filled by ``build``, built once for the whole test run: every
    xdist worker shares the parent of its base temporary directory, and a lock makes the
    others wait for the first. None when ``build`` failed (the reason is kept beside it)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    done, failed = base / f"{name}.done", base / f"{name}.failed"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists() and not failed.exists():
            folder = base / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except Exception as exc:  # the tests then build their own, as without it
                failed.write_text(f"{type(exc).__name__}: {exc}", encoding="utf-8")
            else:
                done.touch()
    return base / name if done.exists() else None


def _migrate_prefect(folder: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", MIGRATE],
        env={**os.environ, "PREFECT_HOME": str(folder), **QUIET_PREFECT},
        capture_output=True,
        timeout=600,
        check=True,
    )


def fresh_prefect_home(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``home`` as a new Prefect home whose database is already migrated."""
    home.mkdir(parents=True, exist_ok=True)
    template = built_once(tmp_path_factory, "prefect-template", _migrate_prefect)
    if template is not None:
        shutil.copy2(template / "prefect.db", home / "prefect.db")
    return home


@pytest.fixture
def prefect_home(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prefect home of this test's own (its database already migrated)."""
    return fresh_prefect_home(tmp_path / "prefect-home", tmp_path_factory)


#: Prefect without telemetry or per-run chatter.
QUIET_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


@pytest.fixture(scope="session", autouse=True)
def _offline_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test process gets its own Prefect home and no telemetry. Under xdist (the whole
    suite) the home starts with the migrated database; a single test process (one test file
    run by hand, a mutation run's tests) does not build it up front: most such runs start no
    flow, and a flow migrates its home itself."""
    home = tmp_path_factory.mktemp("prefect-home")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        fresh_prefect_home(home, tmp_path_factory)
    env = {
        "PREFECT_HOME": str(home),
        "MEMKILN_HOME": str(home),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        **QUIET_PREFECT,
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


def _ingest_corpus(folder: Path) -> None:
    import json

    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    shutil.copytree(SHARED_CORPUS / "rollouts", folder / "corpus")
    summary = ingest_archive(Settings(archive=folder / "corpus", db=folder / "m.duckdb"))
    facts = {"files_seen": summary.files_seen, "rollouts": summary.rollouts}
    (folder / "summary.json").write_text(json.dumps(facts), encoding="utf-8")


@pytest.fixture
def ingested_corpus(
    rollout_corpus: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A folder holding a copy of the shared corpus (``corpus``), the store of one ingest of
    it with the default settings (``m.duckdb``, read it read-only) and that ingest's counts
    (``summary.json``): built once for the whole test run, for the tests that read it."""
    built = built_once(tmp_path_factory, "corpus-ingest", _ingest_corpus)
    if built is None:  # the reason is beside the folder; build this test's own
        built = tmp_path / "corpus-ingest"
        built.mkdir()
        _ingest_corpus(built)
    return built


#: Test files that hold the suite's longest tests (whole runs under Prefect, a Dask cluster,
#: kills and reruns), run first so that the workers do not end on them one after another.
LONGEST_FIRST = (
    "tests/flows/test_dask_runner.py",
    "tests/flows/test_operations.py",
    "tests/reliability/test_secrets_end_to_end.py",
    "tests/reliability/test_crash_safety.py",
    "tests/cli/test_cli.py",
    "tests/pipeline/test_consolidate.py",
    "tests/reliability/test_properties.py",
    "tests/io/test_connect_during_run.py",
    "tests/reliability/test_ingest_memory.py",
    "tests/pipeline/test_backfill.py",
    # the sweeps of the shared corpus (skipped without it)
    "tests/sql/test_audits.py",
    "tests/pipeline/test_quality_corpus.py",
    "tests/transforms/test_heuristic.py",
    "tests/cli/test_render_input.py",
    "tests/transforms/test_redact.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST))

    items.sort(key=order)  # stable: the order within a file is kept
