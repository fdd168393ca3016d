"""The database a new user gets from the README's first command, built once per test module:
``memkiln run --archive <sample archive> --backfill --no-prefect`` (in-process, offline
heuristic backend) in a temp dir."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from memkiln.cli import run_cli

REPO = Path(__file__).resolve().parents[1]
SAMPLE_ARCHIVE = REPO / "data" / "sample-archive"


@dataclass(frozen=True)
class SampleDb:
    db: Path
    memories: Path
    archive: Path


def build_sample_db(root: Path) -> SampleDb:
    archive = root / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, archive)
    db, memories = root / "memkiln.duckdb", root / "memories"
    code = run_cli(
        [
            "run", "--archive", str(archive), "--db", str(db), "--out", str(memories),
            "--backfill", "--no-prefect", "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0, f"memkiln run exited {code}"
    return SampleDb(db=db, memories=memories, archive=archive)


_BUILT: list[SampleDb] = []


def shared_sample_db(tmp_path_factory: pytest.TempPathFactory) -> SampleDb:
    """The sample database, built once for the whole test run and copied into each test
    process, shared there by the modules that only read it (each opens it read-only)."""
    from tests.conftest import built_once

    if not _BUILT:
        own = tmp_path_factory.mktemp("sample")
        built = built_once(tmp_path_factory, "sample-db", build_sample_db)
        if built is None:
            _BUILT.append(build_sample_db(own))
        else:
            shutil.copytree(built, own, dirs_exist_ok=True)
            _BUILT.append(
                SampleDb(
                    db=own / "memkiln.duckdb", memories=own / "memories", archive=own / "archive"
                )
            )
    return _BUILT[0]
