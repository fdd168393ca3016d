"""Project keys: one repository is one project, however it was cloned."""

from __future__ import annotations

import polars as pl
import pytest

from memkiln.transforms.project import normalize_git_remote, project_key


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:a/b.git", "github.com/a/b"),
        ("https://github.com/a/b", "github.com/a/b"),
        ("https://user:secret@GitHub.com/a/b/", "github.com/a/b"),
        ("ssh://git@github.com:22/a/b.git", "github.com/a/b"),
        ("http://gitlab.example.com:8080/grp/sub/proj.git", "gitlab.example.com/grp/sub/proj"),
        ("", None),
        (None, None),
    ],
)
def test_git_remotes_normalize_to_host_and_path(url: str | None, expected: str | None) -> None:
    out = pl.select(normalize_git_remote(pl.lit(url, dtype=pl.String))).item()
    assert out == expected


def test_project_key_falls_back_to_the_working_directory_without_trailing_slash() -> None:
    frame = pl.DataFrame(
        {"remote": [None, "git@github.com:a/b.git"], "cwd": ["/home/u/proj/", "/elsewhere"]}
    )
    out = frame.select(project_key(remote=pl.col("remote"), cwd=pl.col("cwd"))).to_series()
    assert out.to_list() == ["/home/u/proj", "github.com/a/b"]
