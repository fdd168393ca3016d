"""Names of memory files and folders, pinned at the edges where a changed line must fail a test (``bench/mutation.py``).

Expected values are worked out from DESIGN's rules in the test, never by the function under
test: a wrong time or hash in a summary stem puts the file under another name than Codex's
(the two tools' folders stop lining up, and every run renames every summary).
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memkiln.transforms.names import (
    project_dirname,
    sanitize_slug,
    skill_dirname,
    summary_stem,
    uuid_time,
)

# 2026-10-01T12:34:56.789012Z as UUID timestamps: 100-ns ticks since 1582-10-15, plus 7
# ticks below a microsecond (dropped). ticks = 0x1f1bd948286fccf.
WHEN = datetime(2026, 10, 1, 12, 34, 56, 789012, tzinfo=UTC)
# v1: time_low 8286fccf, time_mid bd94, version 1 + time_hi 1f1.
V1 = "8286fccf-bd94-11f1-8123-456789abcdef"
# v6: the same ticks most significant first: 1f1bd948 286f, version 6 + ccf.
V6 = "1f1bd948-286f-6ccf-8123-456789abcdef"
# low 32 bits 0x89abcdef = 2309737967; mod 62**4 = 4629551 = 19*62**3 + 26*62**2 + 22*62 + 11
HASH_OF_TAIL = "jqmb"


def test_uuid_v1_and_v6_carry_their_time() -> None:
    assert uuid_time(V1) == WHEN
    assert uuid_time(V6) == WHEN


def test_other_uuid_versions_and_non_uuids_have_no_time() -> None:
    assert uuid_time("3f2b8c1e-9a4d-4e2f-8b1a-0c9d8e7f6a5b") is None  # v4
    assert uuid_time("not-a-uuid") is None


def test_stems_of_v1_and_v6_ids_use_the_embedded_time_and_the_low_32_bits() -> None:
    later = WHEN + timedelta(days=3)
    assert summary_stem(V1, later, None) == f"2026-10-01T12-34-56-{HASH_OF_TAIL}"
    assert summary_stem(V6, later, "x") == f"2026-10-01T12-34-56-{HASH_OF_TAIL}-x"


def test_a_v4_id_uses_the_update_time() -> None:
    rid = "3f2b8c1e-9a4d-4e2f-8b1a-0c9d8e7f6a5b"
    # low 32 bits 0x8e7f6a5b = 2390714971; mod 62**4 = 11724875 = 49*62**3 + 12*62**2 + 10*62 + 55
    assert summary_stem(rid, WHEN, None) == "2026-10-01T12-34-56-NcaT"


def test_without_any_time_the_stem_starts_at_the_epoch() -> None:
    assert summary_stem("not-a-uuid", None, None) == "1970-01-01T00-00-00-GNP3"


def test_the_stamp_is_utc_whatever_the_machines_time_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        at = datetime(2026, 10, 1, 23, 30, tzinfo=timezone(timedelta(hours=2)))
        assert summary_stem("not-a-uuid", at, None) == "2026-10-01T21-30-00-GNP3"
        assert summary_stem("not-a-uuid", None, None) == "1970-01-01T00-00-00-GNP3"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_slugs_keep_inner_underscores_and_cut_at_sixty() -> None:
    assert sanitize_slug("Run  the TESTS") == "run__the_tests"
    assert sanitize_slug("a_" * 40) == "a_" * 29 + "a"
    assert sanitize_slug(None) == ""
    assert sanitize_slug("é") == ""


def _digest(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=3).hexdigest()


@pytest.mark.parametrize(
    ("key", "readable"),
    [
        ("https://github.com/acme/app", "https-github.com-acme-app"),
        ("/home/me/work/app", "home-me-work-app"),
        ("-.-x.y-.-", "x.y"),
        ("C:\\Users\\Me\\app", "C-Users-Me-app"),
        ("...", "project"),
        ("", "project"),
        ("a" * 100, "a" * 80),
        ("a" * 79 + "/b", "a" * 79),
    ],
)
def test_project_folders_are_readable_and_unique_per_key(key: str, readable: str) -> None:
    assert project_dirname(key) == f"{readable}-{_digest(key)}"


def test_two_keys_that_read_the_same_get_two_folders() -> None:
    assert project_dirname("/a/b") != project_dirname("/a b")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Deploy To Prod!", "deploy-to-prod"),
        ("run_tests", "run-tests"),
        ("../../etc/passwd", "etc-passwd"),
        ("a" * 70, "a" * 64),
        ("a" * 63 + "-b", "a" * 63),
        ("---", None),
        ("", None),
        ("ÄÖ", None),
    ],
)
def test_skill_folders_from_a_models_answer(name: str, expected: str | None) -> None:
    assert skill_dirname(name) == expected


def test_long_runs_of_separators_around_a_name_are_dropped_before_the_cut() -> None:
    key = "." * 90 + "repo" + "-" * 90
    assert project_dirname(key) == f"repo-{_digest(key)}"
    assert skill_dirname("-" * 70 + "deploy") == "deploy"


def test_letters_at_the_ends_of_a_project_key_stay() -> None:
    assert project_dirname("XrepoX") == f"XrepoX-{_digest('XrepoX')}"
