"""The audit queries in sql/audits return zero rows after real runs, and catch what they
are written for."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from memkiln.io.store import audits, open_store
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings


def test_audits_are_clean_after_ingest_and_extract_of_the_sample(
    sample_archive: Path, tmp_path: Path
) -> None:
    s = Settings(
        archive=sample_archive, db=tmp_path / "m.duckdb", backfill=True, min_rollout_idle_hours=0
    )
    ingest_archive(s)
    extract_store(s)
    con = open_store(s.db)
    try:
        assert audits(con) == {name: 0 for name in audits(con)}
        assert set(audits(con)) >= {"items_unique", "rollouts_have_files", "outputs_match_jobs"}
    finally:
        con.close()


def test_the_uniqueness_audit_finds_a_duplicated_item(sample_archive: Path, tmp_path: Path) -> None:
    s = Settings(archive=sample_archive, db=tmp_path / "m.duckdb")
    ingest_archive(s)
    con = open_store(s.db)
    try:
        con.execute("insert into items select * from items limit 1")
        assert audits(con)["items_unique"] == 1
    finally:
        con.close()


@pytest.mark.corpus
def test_audits_are_clean_after_ingesting_the_whole_corpus(ingested_corpus: Path) -> None:
    with duckdb.connect(str(ingested_corpus / "m.duckdb"), read_only=True) as con:
        assert all(n == 0 for n in audits(con).values()), audits(con)
