"""Project keys pinned at the edges where a changed line must fail a test (``bench/mutation.py``): one repository is one
project whatever the remote's spelling, and a blank remote falls back to the directory."""

from __future__ import annotations

import polars as pl
import pytest

from memkiln.transforms.project import normalize_git_remote, project_key


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("github.com:a/b", "github.com/a/b"),  # scp-like without a user
        ("  https://Git.Example.com/A/b.git//  ", "git.example.com/A/b"),  # only the host
        ("  https://GitHub.com/A/b.git//  ", "github.com/a/b"),  # GitHub ignores case
        ("git@host:/abs/repo.git", "host/abs/repo"),
        ("ssh://host:2222", "host"),
        ("https://u@h.com:443", "h.com"),
        ("HTTPS://x.org/y", "x.org/y"),
        ("file:///srv/git/repo.git", "/srv/git/repo"),
        ("   ", None),
    ],
)
def test_more_spellings_of_a_remote(url: str, expected: str | None) -> None:
    assert pl.select(normalize_git_remote(pl.lit(url, dtype=pl.String))).item() == expected


def test_a_blank_remote_or_directory_is_no_key() -> None:
    frame = pl.DataFrame(
        {"remote": ["", None, "  ", None], "cwd": ["C:\\work\\app\\", "  /x//  ", "", None]}
    )
    out = frame.select(project_key(remote=pl.col("remote"), cwd=pl.col("cwd"))).to_series()
    assert out.to_list() == ["C:\\work\\app", "/x", None, None]
