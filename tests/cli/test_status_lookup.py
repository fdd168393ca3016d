"""Finding a project from what a user types (``memkiln show``): the pure matching, on rows
shaped like the store's."""

from __future__ import annotations

import polars as pl
import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.lookup import key_forms, match_project
from memkiln.transforms.redact import redact_text

RULES = load_rules()
SECRET_DIR = "/home/u/token=ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
STORED_SECRET_DIR = redact_text(SECRET_DIR, rules=RULES)
PROJECTS = pl.DataFrame(
    {
        "project_key": [
            "github.com/a/b", "github.com/acme/shop", "github.com/acme/shopfront",
            "/home/dev/bigbox", STORED_SECRET_DIR,
        ],
        "folder": ["github.com-a-b-1", "shop-2", "shopfront-3", "bigbox-4", "secret-5"],
    }
)  # fmt: skip
CWDS = pl.DataFrame(
    {
        "project_key": ["github.com/a/b", "github.com/a/b", "github.com/acme/shop"],
        "cwd": ["/path/to/cwd", "/other/clone/", "/home/dev/shop"],
    }
)


def find(query: str) -> tuple[list[str], str | None]:
    found = match_project(query, PROJECTS, CWDS, rules=RULES)
    return found.keys, found.tier


def test_the_stored_secret_dir_is_really_redacted() -> None:
    assert STORED_SECRET_DIR != SECRET_DIR and "[REDACTED_SECRET]" in STORED_SECRET_DIR


@pytest.mark.parametrize(
    ("query", "tier"),
    [
        ("https://github.com/a/b", "key"),
        ("https://user:pw@GitHub.com/a/b.git/", "key"),
        ("git@github.com:a/b.git", "key"),
        ("ssh://git@github.com:22/a/b", "key"),
        ("github.com/a/b", "key"),
        ("/path/to/cwd/", "cwd"),
        ("/other/clone", "cwd"),
        ("github.com-a-b-1", "folder"),
        ("b", "name"),
        ("B", "name"),
    ],
)
def test_every_form_of_a_remote_a_cwd_a_folder_or_the_name_finds_the_project(
    query: str, tier: str
) -> None:
    assert find(query) == (["github.com/a/b"], tier)


def test_a_name_that_is_part_of_one_project_name_finds_it() -> None:
    assert find("bigb") == (["/home/dev/bigbox"], "part of name")
    assert find("/home/dev/bigbox/") == (["/home/dev/bigbox"], "key")


def test_an_exact_name_wins_over_names_that_contain_it() -> None:
    assert find("shop") == (["github.com/acme/shop"], "name")


def test_a_part_of_several_names_is_ambiguous_and_lists_them() -> None:
    assert find("sho") == (["github.com/acme/shop", "github.com/acme/shopfront"], "part of name")


def test_nothing_matches_an_unknown_or_empty_name() -> None:
    assert find("zzz") == ([], None)
    assert find("  ") == ([], None)


def test_a_directory_whose_stored_key_was_redacted_is_found_by_its_real_path() -> None:
    assert find(SECRET_DIR + "/") == ([STORED_SECRET_DIR], "key")
    assert STORED_SECRET_DIR in key_forms(SECRET_DIR, rules=RULES)
