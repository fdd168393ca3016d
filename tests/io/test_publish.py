"""Publishing into the agents' folders of a temporary HOME laid out as each agent lays it
out: the user's own notes, a linked project folder, Codex with and without its own memory,
agents not installed or with memory off, and what a second publish and --remove leave."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest

from memkiln.io.publish import Project, git_root, publish_targets
from memkiln.io.rules import load_rules
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.publish import (
    CLAUDE_LOADED_BYTES,
    CLAUDE_LOADED_LINES,
    ProjectMemory,
    PublishSummary,
    line_count,
)
from memkiln.transforms.redact import RuleSet

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SHOP = "/Users/a/Build/shop"
BLOG = "/Users/a/blog"
USER_NOTES = b"# My notes\r\n- deploy on Fridays? never\r\n- use pnpm"  # CRLF, no final newline


@cache
def rules() -> RuleSet:
    return load_rules()


def project(key: str, cwd: str, out: Path) -> Project:
    folder = out / key.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    summary = (
        "v1\n# Memory summary: x\n\n## Do and avoid in this project\n\n"
        f"### The user's preferences\n\n- Use pnpm.\n- Deploy with {TOKEN} (planted)\n"
    )
    (folder / "memory_summary.md").write_text(summary)
    details = f"# Memory: {key}\n\n- a detail; secret {TOKEN}\n"
    (folder / "MEMORY.md").write_text(details)
    return Project(ProjectMemory(key, str(folder), summary, details), (cwd,))


def layout(tmp_path: Path) -> tuple[dict[str, str], list[Project]]:
    """A HOME with all three agents installed and their memory on; two projects."""
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".omp" / "agent").mkdir(parents=True)
    (home / ".omp" / "agent" / "config.yml").write_text("memory:\n  backend: local\n")
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text("[features]\nmemories = true\n")
    out = tmp_path / "memories"
    projects = [project("github.com/a/shop", SHOP, out), project("/Users/a/blog", BLOG, out)]
    return {"HOME": str(home)}, projects


def publish(env: dict[str, str], projects: list[Project], **kw: object) -> PublishSummary:
    return publish_targets(
        kw.pop("targets", ("claude", "omp", "codex")),  # type: ignore[arg-type]
        projects,
        rules=rules(),
        index="/srv/memories/INDEX.md",
        env=env,
        **kw,  # type: ignore[arg-type]
    )


def tree(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path below ``root``: its bytes (None for a folder) and mtime."""
    out: dict[str, tuple[bytes | None, int]] = {}
    for path in sorted(root.rglob("*")):
        if ".cache" in path.parts:
            continue
        data = None if path.is_dir() or path.is_symlink() else path.read_bytes()
        out[str(path.relative_to(root))] = (data, path.lstat().st_mtime_ns)
    return out


def written(home: Path) -> list[Path]:
    return [
        p for p in home.rglob("*") if p.is_file() and ".cache" not in p.parts and p.suffix == ".md"
    ]


def test_the_users_memory_md_keeps_its_notes_and_gets_back_its_bytes(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    shop = home / ".claude" / "projects" / "-Users-a-Build-shop" / "memory"
    shop.mkdir(parents=True)
    (shop / "MEMORY.md").write_bytes(USER_NOTES)
    (shop / "debugging.md").write_text("Claude's own topic file\n")
    before = tree(home)

    summary = publish(env, projects)
    text = (shop / "MEMORY.md").read_bytes()
    assert text.endswith(USER_NOTES)  # intact, after memkiln's block
    assert text.decode().splitlines()[1] == MEMORY_GUIDANCE
    assert line_count(text.decode()) <= CLAUDE_LOADED_LINES and len(text) <= CLAUDE_LOADED_BYTES
    assert (shop / "memkiln.md").is_file() and "memkiln.md" in text.decode()
    assert (shop / "debugging.md").read_text() == "Claude's own topic file\n"
    # each agent's file where it reads it
    assert (home / ".claude" / "projects" / "-Users-a-blog" / "memory" / "MEMORY.md").is_file()
    assert (home / ".omp/agent/memories/--Users-a-Build-shop--/memory_summary.md").is_file()
    assert (home / ".omp/agent/memories/--Users-a-blog--/MEMORY.md").is_file()
    assert (home / ".codex" / "memories" / "memory_summary.md").is_file()
    assert summary.written("claude") == 4 and summary.written("omp") == 4
    assert summary.written("codex") == 1
    for path in written(home):  # the planted secret is redacted again before writing
        assert TOKEN not in path.read_text(), path
        if path.name != "debugging.md":
            assert MEMORY_GUIDANCE in path.read_text(), path

    # a second publish changes nothing, mtimes included
    after = tree(home)
    again = publish(env, projects)
    assert tree(home) == after
    assert {s.action for s in again.steps} == {"keep"}

    # --remove: the user's file byte-identical, everything memkiln wrote gone
    removed = publish(env, projects, remove=True)
    assert (shop / "MEMORY.md").read_bytes() == USER_NOTES
    assert {k: v[0] for k, v in tree(home).items()} == {k: v[0] for k, v in before.items()}
    assert removed.removed() == 8 and removed.written() == 1  # the block taken out of one


def test_a_linked_project_folder_is_not_written_through(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / ".claude" / "projects" / "-Users-a-Build-shop").symlink_to(elsewhere)
    summary = publish(env, projects, targets=("claude",))
    assert list(elsewhere.iterdir()) == []
    said = [line for line in summary.lines if "symbolic link" in line]
    assert len(said) == 1 and "-Users-a-Build-shop" in said[0]
    # the other project is still published
    assert (home / ".claude" / "projects" / "-Users-a-blog" / "memory" / "MEMORY.md").is_file()
    # and --remove does not go through it either
    publish(env, projects, targets=("claude",), remove=True)
    assert list(elsewhere.iterdir()) == []


def test_codex_own_memory_is_left_alone_unless_told_to_add_alongside(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    memories = Path(env["HOME"]) / ".codex" / "memories"
    memories.mkdir()
    theirs = b"v1\nCodex's own summary of the user.\n"
    (memories / "memory_summary.md").write_bytes(theirs)
    (memories / "MEMORY.md").write_text("Codex's details\n")

    refused = publish(env, projects, targets=("codex",))
    assert (memories / "memory_summary.md").read_bytes() == theirs
    assert refused.written() == 0 and "codex" in refused.skipped_targets
    assert len([line for line in refused.lines if "Codex's own memory" in line]) == 1

    beside = publish(env, projects, targets=("codex",), alongside=True)
    text = (memories / "memory_summary.md").read_bytes()
    assert beside.written("codex") == 1 and text.endswith(theirs)
    assert text.decode().splitlines()[1] == MEMORY_GUIDANCE
    assert "github.com/a/shop" in text.decode()
    assert (memories / "MEMORY.md").read_text() == "Codex's details\n"

    publish(env, projects, targets=("codex",), remove=True)
    assert (memories / "memory_summary.md").read_bytes() == theirs


def test_codex_without_memory_of_its_own_gets_memkilns_summary(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    summary = publish(env, projects, targets=("codex",))
    path = Path(env["HOME"]) / ".codex" / "memories" / "memory_summary.md"
    assert summary.written("codex") == 1
    assert path.read_text().splitlines()[0] == MEMORY_GUIDANCE
    assert len(path.read_bytes()) <= 10_000
    # memkiln's own file is not "Codex's own memory": the next publish updates it
    projects.append(project("github.com/a/new", "/Users/a/new", tmp_path / "memories"))
    assert publish(env, projects, targets=("codex",)).written("codex") == 1
    assert "github.com/a/new" in path.read_text()
    publish(env, projects, targets=("codex",), remove=True)
    assert not (path.parent).exists()  # the folder memkiln made is gone too


def test_an_agent_not_installed_or_with_memory_off_is_one_line(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    (home / ".omp" / "agent" / "config.yml").write_text("memory:\n  backend: off\n")
    (home / ".codex" / "config.toml").write_text("[features]\nother = true\n")
    summary = publish({**env, "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}, projects)
    assert set(summary.skipped_targets) == {"claude", "omp", "codex"}
    assert len(summary.lines) == 3 and all("memory is off" in s for s in summary.lines)
    assert written(home) == []

    gone = publish({"HOME": str(tmp_path / "nobody")}, projects)
    assert all("not installed" in line for line in gone.lines) and len(gone.lines) == 3


def test_the_agents_environment_moves_their_folders(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    claude, agent, codex = tmp_path / "c", tmp_path / "pi-agent", tmp_path / "cx"
    for folder in (claude, agent, codex):
        folder.mkdir()
    (agent / "config.yml").write_text('"memory.backend": local\n')  # a flat key works too
    (codex / "config.toml").write_text("[profiles.work.features]\nmemories = true\n")
    moved = {
        **env,
        "CLAUDE_CONFIG_DIR": str(claude),
        "PI_CODING_AGENT_DIR": str(agent),
        "CODEX_HOME": str(codex),
    }
    summary = publish(moved, projects)
    assert not summary.skipped_targets
    assert (claude / "projects" / "-Users-a-blog" / "memory" / "MEMORY.md").is_file()
    assert (agent / "memories" / "--Users-a-blog--" / "memory_summary.md").is_file()
    assert (codex / "memories" / "memory_summary.md").is_file()
    assert written(Path(env["HOME"])) == []


def test_oh_my_pis_own_memory_and_an_edited_file_are_left_alone(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    own = home / ".omp/agent/memories/--Users-a-blog--"
    own.mkdir(parents=True)
    (own / "memory_summary.md").write_text("Oh My Pi's own summary\n")
    summary = publish(env, projects)
    assert (own / "memory_summary.md").read_text() == "Oh My Pi's own summary\n"
    assert not (own / "MEMORY.md").exists()
    assert any("Oh My Pi's own memory" in line for line in summary.lines)

    topic = home / ".claude/projects/-Users-a-blog/memory/memkiln.md"
    topic.write_text(topic.read_text().replace("a detail", "my edit"))
    edited = topic.read_bytes()
    again = publish(env, projects)
    assert topic.read_bytes() == edited
    assert any("edited since memkiln wrote it" in line for line in again.lines)
    publish(env, projects, remove=True)
    assert topic.read_bytes() == edited  # not deleted: it holds the user's edit


def test_a_dry_run_lists_every_file_and_writes_nothing(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    before = tree(home)
    summary = publish(env, projects, dry_run=True)
    assert tree(home) == before
    assert {s.action for s in summary.steps} == {"create"}
    assert all(s.size > 0 for s in summary.steps) and len(summary.steps) == 9
    publish(env, projects)
    after = tree(home)
    listed = publish(env, projects, remove=True, dry_run=True)
    assert tree(home) == after
    assert listed.removed() == 9


def test_claude_code_scopes_memory_to_the_repository_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert git_root(str(repo / "src" / "pkg")) == str(repo)
    assert git_root("/no/such/dir") == "/no/such/dir"
    env, _ = layout(tmp_path)
    inside = project("repo", str(repo / "src" / "pkg"), tmp_path / "memories")
    publish(env, [inside], targets=("claude", "omp"))
    home = Path(env["HOME"])
    from memkiln.transforms.publish import claude_dirname, omp_dirname

    assert (home / ".claude/projects" / claude_dirname(str(repo)) / "memory/MEMORY.md").is_file()
    # Oh My Pi keys memory by the raw working directory
    assert (home / ".omp/agent/memories" / omp_dirname(str(repo / "src" / "pkg"))).is_dir()


@pytest.mark.parametrize("broken", ["begin", "full"])
def test_a_memory_md_that_cannot_take_a_block_is_left_as_it_is(tmp_path: Path, broken: str) -> None:
    env, projects = layout(tmp_path)
    folder = Path(env["HOME"]) / ".claude/projects/-Users-a-blog/memory"
    folder.mkdir(parents=True)
    data = (
        b"<!-- memkiln:begin: written by memkiln publish -->\n- half a block\n"
        if broken == "begin"
        else b"- a line\n" * CLAUDE_LOADED_LINES
    )
    (folder / "MEMORY.md").write_bytes(data)
    summary = publish(env, projects, targets=("claude",))
    assert (folder / "MEMORY.md").read_bytes() == data
    assert any(str(folder / "MEMORY.md") in line for line in summary.lines)


def test_a_file_memkiln_cannot_read_is_one_failure_and_the_rest_is_published(
    tmp_path: Path,
) -> None:
    env, projects = layout(tmp_path)
    topic = Path(env["HOME"]) / ".claude/projects/-Users-a-blog/memory/memkiln.md"
    topic.mkdir(parents=True)  # a folder where memkiln's file goes
    summary = publish(env, projects, targets=("claude",))
    assert [s.path for s in summary.failed()] == [str(topic)]
    assert any(line.startswith(f"claude: cannot read {topic}") for line in summary.lines)
    assert (topic.parent / "MEMORY.md").is_file()
    assert summary.written("claude") == 3


def test_removing_one_project_leaves_the_others_and_codexs_summary(tmp_path: Path) -> None:
    env, projects = layout(tmp_path)
    home = Path(env["HOME"])
    publish(env, projects)
    blog = projects[1]
    summary = publish(env, [blog], remove=True, only_these=True)
    assert not (home / ".claude/projects/-Users-a-blog").exists()
    assert not (home / ".omp/agent/memories/--Users-a-blog--").exists()
    assert (home / ".claude/projects/-Users-a-Build-shop/memory/memkiln.md").is_file()
    assert (home / ".omp/agent/memories/--Users-a-Build-shop--/MEMORY.md").is_file()
    assert (home / ".codex/memories/memory_summary.md").is_file()
    assert any(line.startswith("codex: its one summary covers") for line in summary.lines)
