"""The memory-file writer, pinned at the edges where a changed line must fail a test (``bench/mutation.py``): which paths it
refuses, what a write returns and leaves behind, and what pruning and cleaning remove.
(The atomicity of a write under a kill is tested elsewhere.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memkiln.errors import ConfigError
from memkiln.io.memory_files import TEMP_PREFIX, OutputRoot, UnsafePathError


@pytest.fixture
def out(tmp_path: Path) -> OutputRoot:
    return OutputRoot(tmp_path / "memories")


def test_the_root_is_created_with_its_parents(tmp_path: Path) -> None:
    root = OutputRoot(tmp_path / "a" / "b" / "memories")
    assert root.root == (tmp_path / "a" / "b" / "memories").resolve()
    assert root.root.is_dir()


def test_a_root_that_is_a_link_or_a_file_or_cannot_be_made_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match="symbolic link"):
        OutputRoot(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        OutputRoot(tmp_path / "file")
    with pytest.raises(ConfigError, match="cannot create"):
        OutputRoot(tmp_path / "file" / "below")


@pytest.mark.parametrize(
    "rel",
    ["", ".", "..", "../x.md", "a/../../x.md", "/etc/x.md", "a\\b.md", "a\x00.md"],
)
def test_paths_that_are_not_plain_relative_paths_are_refused(out: OutputRoot, rel: str) -> None:
    with pytest.raises(UnsafePathError, match="not a plain relative path"):
        out.path(rel)
    with pytest.raises(UnsafePathError):
        out.write(rel, "x")


def test_a_link_anywhere_on_the_way_is_refused(out: OutputRoot, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out.root / "proj").mkdir()
    (out.root / "proj" / "deep").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        out.write("proj/deep/MEMORY.md", "x")
    (out.root / "top").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        out.write("top/a/b.md", "x")
    (out.root / "proj" / "file.md").symlink_to(elsewhere / "target.md")
    with pytest.raises(UnsafePathError, match="it is a symbolic link"):
        out.write("proj/file.md", "x")
    assert list(elsewhere.iterdir()) == []


def test_a_path_inside_the_root_is_returned_as_given(out: OutputRoot) -> None:
    assert out.path("p/rollout_summaries/a.md") == out.root / "p" / "rollout_summaries" / "a.md"


def test_a_write_reports_a_change_and_leaves_no_temporary(out: OutputRoot) -> None:
    assert out.write("p/sub/MEMORY.md", "héllo\n") is True
    target = out.root / "p" / "sub" / "MEMORY.md"
    assert target.read_bytes() == "héllo\n".encode()
    assert out.read("p/sub/MEMORY.md") == "héllo\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["MEMORY.md"]


def test_rewriting_the_same_text_touches_nothing(out: OutputRoot) -> None:
    out.write("p/a.md", "same\n")
    target = out.root / "p" / "a.md"
    os.utime(target, (1_000_000, 1_000_000))
    assert out.write("p/a.md", "same\n") is False
    assert target.stat().st_mtime == 1_000_000
    assert out.write("p/a.md", "changed\n") is True
    assert target.read_text() == "changed\n"
    assert target.stat().st_mtime != 1_000_000


def test_reading_a_missing_file_gives_none(out: OutputRoot) -> None:
    assert out.read("p/missing.md") is None


def test_pruning_removes_only_unkept_files_with_the_suffix(out: OutputRoot) -> None:
    for name in ("keep.md", "old.md", "notes.txt"):
        out.write(f"p/rollout_summaries/{name}", "x")
    (out.root / "p" / "rollout_summaries" / "dir.md").mkdir()
    removed = out.prune("p/rollout_summaries", keep={"keep.md"})
    assert removed == ["p/rollout_summaries/old.md"]
    left = sorted(p.name for p in (out.root / "p" / "rollout_summaries").iterdir())
    assert left == ["dir.md", "keep.md", "notes.txt"]
    assert out.prune("p/rollout_summaries", keep=set(), suffix=".txt") == [
        "p/rollout_summaries/notes.txt"
    ]
    assert out.prune("p/nothing-here", keep=set()) == []


def test_pruning_skill_folders_keeps_the_kept_ones_and_never_follows_a_link(
    out: OutputRoot, tmp_path: Path
) -> None:
    out.write("p/skills/keep/SKILL.md", "x")
    out.write("p/skills/old/SKILL.md", "x")
    out.write("p/skills/stray.md", "x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    (out.root / "p" / "skills" / "linked").symlink_to(outside)
    assert out.prune_dirs("p/skills", keep={"keep"}) == ["p/skills/old"]
    left = sorted(p.name for p in (out.root / "p" / "skills").iterdir())
    assert left == ["keep", "linked", "stray.md"]
    assert (outside / "precious").exists()
    assert out.prune_dirs("p/none", keep=set()) == []


def test_remove_takes_a_file_or_a_folder_and_says_whether_it_did(out: OutputRoot) -> None:
    out.write("p/a.md", "x")
    out.write("p/skills/s/SKILL.md", "x")
    assert out.remove("p/a.md") is True
    assert not (out.root / "p" / "a.md").exists()
    assert out.remove("p/skills") is True
    assert not (out.root / "p" / "skills").exists()
    assert out.remove("p/a.md") is False


def test_cleaning_removes_only_temporaries_a_killed_run_left(
    out: OutputRoot, tmp_path: Path
) -> None:
    out.write("p/a.md", "x")
    (out.root / "p" / f"{TEMP_PREFIX}1").write_text("partial")
    (out.root / f"{TEMP_PREFIX}2").write_text("partial")
    (out.root / "p" / f"{TEMP_PREFIX}dir").mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (out.root / f"{TEMP_PREFIX}link").symlink_to(victim)
    assert out.clean_temporaries() == 2
    assert not (out.root / "p" / f"{TEMP_PREFIX}1").exists()
    assert not (out.root / f"{TEMP_PREFIX}2").exists()
    assert (out.root / "p" / f"{TEMP_PREFIX}dir").is_dir()
    assert victim.read_text() == "keep me"
    assert (out.root / "p" / "a.md").read_text() == "x"
    assert out.clean_temporaries() == 0


def test_an_existing_output_directory_is_used_as_it_is(tmp_path: Path) -> None:
    first = OutputRoot(tmp_path / "memories")
    first.write("p/a.md", "x")
    again = OutputRoot(tmp_path / "memories")
    assert again.read("p/a.md") == "x"
