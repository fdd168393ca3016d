"""The ``segments`` table: written when sessions are extracted, by any backend, replaced whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl

from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.builders import make_archive
from tests.fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parents[2]


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(query).fetchall()


def test_a_run_over_the_sample_archive_stores_every_extracted_sessions_segments(
    tmp_path: Path,
) -> None:
    archive, db = tmp_path / "archive", tmp_path / "m.duckdb"
    shutil.copytree(REPO / "data" / "sample-archive", archive)
    env = os.environ | {"MEMKILN_DB": str(db), "MEMKILN_OUT": str(tmp_path / "out")}
    memkiln = Path(sys.executable).with_name("memkiln")
    cmd = [str(memkiln), "run", "--archive", str(archive), "--backfill", "--no-prefect"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    extracted = rows(db, "select rollout_id from stage1_jobs where status like 'succeeded%'")
    segmented = rows(db, "select distinct rollout_id from segments")
    assert extracted and sorted(extracted) == sorted(segmented)
    segments = pl.DataFrame(
        rows(db, "select rollout_id, segment_index, first_seq, last_seq from segments"),
        schema=["rollout_id", "segment_index", "first_seq", "last_seq"],
        orient="row",
    ).sort("rollout_id", "segment_index")
    # per session: numbered from 0, in order, ranges that do not overlap
    checks = segments.group_by("rollout_id").agg(
        numbered=(pl.col("segment_index") == pl.int_range(pl.len())).all(),
        ordered=(pl.col("first_seq") <= pl.col("last_seq")).all()
        & (pl.col("first_seq").shift(-1) > pl.col("last_seq")).fill_null(True).all(),
    )
    assert checks["numbered"].all() and checks["ordered"].all()
    assert rows(db, "select count(*) from segments where boundary not in "
                    "('start', 'topic_switch', 'time_gap', 'turn_limit')") == [(0,)]  # fmt: skip


def test_the_openai_backend_stores_segments_too_and_extracting_again_replaces_them(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    make_archive(tmp_path / "archive", 3)
    base = Settings(
        archive=tmp_path / "archive",
        db=tmp_path / "m.duckdb",
        backfill=True,
        min_rollout_idle_hours=0,
    )
    ingest_archive(base)
    model = base.model_copy(
        update={
            "backend": "openai",
            "base_url": fake_openai.base_url,
            "model": "fake-model",
            "max_retries": 0,
            "request_timeout_s": 5,
        }
    )
    assert extract_store(model).outcomes == {"succeeded": 3}
    first = rows(tmp_path / "m.duckdb", "select rollout_id, segment_index from segments")
    assert len({rid for rid, _ in first}) == 3
    extract_store(base)  # another backend: extracted again, segments replaced, not added
    again = rows(tmp_path / "m.duckdb", "select rollout_id, segment_index from segments")
    assert sorted(again) == sorted(first)
