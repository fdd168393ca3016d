"""``consolidate --project A`` touches project A only: every other project's files (bytes and
modification times), its ``consolidation_jobs`` row and its line of INDEX.md are left as they
were, even when A changed and the others have nothing new."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb

from memkiln.pipeline.consolidate import consolidate_store
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from tests.pipeline.test_consolidate import T0, add_session, folders, settings, snapshot

SHOP = "github.com/acme/shop"


def job_rows(db: Path) -> dict[str, tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("select * from consolidation_jobs order by project_key").fetchall()
    return {str(row[0]): tuple(row) for row in rows}


def test_consolidating_one_project_by_name_leaves_every_other_project_as_it_was(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    projects = [("shop", "Fix the cart totals."), ("blog", "Add an RSS feed."),
                ("docs", "Fix the broken links."), ("api", "Add a health endpoint.")]  # fmt: skip
    for n, (name, request) in enumerate(projects, start=1):
        add_session(
            archive, n, remote=f"git@github.com:acme/{name}.git", cwd=f"/src/{name}",
            request=f"{request} Always run pytest -q before committing.", at=T0,
        )  # fmt: skip
    s = settings(tmp_path, prefect=False, progress=False)
    ingest_archive(s)
    extract_store(s)
    consolidate_store(s)
    shop = next(f.name for f in folders(s.out) if f.name.startswith("github.com-acme-shop"))
    before = snapshot(s.out)
    others_before = {k: v for k, v in before.items() if "/" in k and not k.startswith(shop)}
    jobs_before = job_rows(s.db)
    index_before = (s.out / "INDEX.md").read_text().splitlines()
    assert len(folders(s.out)) == 4 and len(others_before) >= 3 * 3

    # a new session of the shop only, then the shop consolidated by name
    add_session(
        archive, 9, remote="https://github.com/acme/shop", cwd="/tmp/shop-clone",
        request="Add a discount code field.", at=T0 + timedelta(days=1),
    )  # fmt: skip
    ingest_archive(s)
    extract_store(s)
    summary = consolidate_store(s, project=SHOP)

    after = snapshot(s.out)
    assert summary.projects == {SHOP: "succeeded"}
    assert {k: v for k, v in after.items() if k in others_before} == others_before
    assert {k for k in after if "/" in k and not k.startswith(shop)} == set(others_before)
    assert any(after[k] != before.get(k) for k in after if k.startswith(shop + "/"))
    jobs_after = job_rows(s.db)
    assert {k: v for k, v in jobs_after.items() if k != SHOP} == {
        k: v for k, v in jobs_before.items() if k != SHOP
    }
    index_after = (s.out / "INDEX.md").read_text().splitlines()
    for name in ("blog", "docs", "api"):
        line = [ln for ln in index_before if f"acme-{name}" in ln or f"acme/{name}" in ln]
        assert line and all(ln in index_after for ln in line), name


def test_every_ingested_project_is_listed_even_with_0_memories(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    for n, name in enumerate(("shop", "blog", "docs"), start=1):
        add_session(
            archive, n, remote=f"git@github.com:acme/{name}.git", cwd=f"/src/{name}",
            request="Fix the build. Always run pytest -q before committing.", at=T0,
        )  # fmt: skip
    s = settings(tmp_path, prefect=False, progress=False)
    ingest_archive(s)

    def listed() -> dict[str, tuple[int, int]]:
        with duckdb.connect(str(s.db), read_only=True) as con:
            rows = con.execute("select project_key, sessions, memories from v_projects").fetchall()
        return {str(k): (int(n), int(m)) for k, n, m in rows}

    keys = {f"github.com/acme/{name}" for name in ("shop", "blog", "docs")}
    assert listed() == {k: (1, 0) for k in keys}  # ingested, nothing extracted yet
    extract_store(s)
    consolidate_store(s, project=SHOP)
    after = listed()
    assert set(after) == keys
    assert after[SHOP][1] > 0
    assert {k: v for k, v in after.items() if k != SHOP} == {k: (1, 0) for k in keys - {SHOP}}
