"""What ``memkiln publish`` writes, as pure functions: the agents' folder names (checked
against the session folders of the shared corpus), the marked block spliced into and out of
a user's file byte for byte, owned files, and every text within what its agent loads."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.guidance import MEMORY_GUIDANCE
from memkiln.transforms.publish import (
    CLAUDE_LOADED_BYTES,
    CLAUDE_LOADED_LINES,
    CODEX_BYTES,
    CODEX_TOKENS,
    BrokenBlockError,
    ProjectMemory,
    claude_block,
    claude_dirname,
    claude_topic,
    codex_block,
    codex_summary,
    line_count,
    omp_details,
    omp_dirname,
    omp_summary,
    outermost,
    owned,
    ownership,
    shared_preferences,
    splice,
    summary_lines,
    unsplice,
)
from memkiln.transforms.redact import RuleSet
from memkiln.transforms.tokens import count_tokens

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@cache
def rules() -> RuleSet:
    return load_rules()


SUMMARY = f"""v1
# Memory summary: github.com/a/shop

Load this at the start of a session; MEMORY.md and rollout_summaries/ hold the details.

## Do and avoid in this project

### The user's preferences

- Use pnpm, never npm.
- Keep answers short.

### Pitfalls: what failed, and what to do instead

- `pytest -x` failed on the fixture; run `make test` instead (token {TOKEN}).

## What is in memory (most recent first)

### 2026-05-01
- fix the cart (success): rollout_summaries/2026-05-01T10-00-00-abcd-cart.md
"""


def memory(key: str = "github.com/a/shop", summary: str = SUMMARY, **kw: object) -> ProjectMemory:
    return ProjectMemory(
        key=key,
        folder=f"/srv/memories/{key.replace('/', '-')}",
        summary=summary,
        details=f"# Memory: {key}\n\n- details with {TOKEN}\n",
        **kw,  # type: ignore[arg-type]
    )


# -- folder names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/Users/a/Build/FundWise", "-Users-a-Build-FundWise"),
        ("E:\\CC-test", "E--CC-test"),
        ("/Users/alex/workspace/cli/.worktrees/3", "-Users-alex-workspace-cli--worktrees-3"),
        ("/home/u/my_proj v2", "-home-u-my-proj-v2"),
        ("/home/u/café", "-home-u-caf-"),  # one UTF-16 unit
        ("/home/u/🚀", "-home-u---"),  # two UTF-16 units
    ],
)
def test_claude_names_a_folder_by_replacing_each_non_alphanumeric_code_unit(
    path: str, name: str
) -> None:
    assert claude_dirname(path) == name


@pytest.mark.parametrize(
    ("cwd", "name"),
    [
        ("/home/u/proj", "--home-u-proj--"),
        ("/Users/badlogic/workspaces/pi-mono", "--Users-badlogic-workspaces-pi-mono--"),
        ("C:\\Users\\x\\proj", "--C--Users-x-proj--"),
        ("//srv/x", "---srv-x--"),  # only one leading separator is dropped
        ("/home/u/my.proj_1", "--home-u-my.proj_1--"),  # only / \\ : change
    ],
)
def test_oh_my_pi_names_a_folder_like_its_encode_project_path(cwd: str, name: str) -> None:
    assert omp_dirname(cwd) == name


def test_sessions_in_sub_folders_share_the_outermost_folder() -> None:
    paths = ["/r/shop/api", "/r/shop", "/r/shopfront", "C:\\w\\x", "C:\\w\\x\\y"]
    assert outermost(paths) == ["/r/shop", "/r/shopfront", "C:\\w\\x"]


def _cwds(path: Path) -> set[str]:
    found = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("cwd"), str):
            found.add(record["cwd"])
    return found


@pytest.mark.corpus
def test_the_encoders_name_every_session_folder_of_the_shared_corpus(
    rollout_corpus: Path,
) -> None:
    with (rollout_corpus / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    checked: list[str] = []
    for row in rows:
        if row["format"] not in ("claude", "pi"):
            continue
        local = rollout_corpus / row["local_file"]
        cwds = _cwds(local)
        text = local.read_text(encoding="utf-8", errors="replace")
        # the folder the session file was kept in: every folder of its path named like an
        # encoded absolute path (Claude Code: -Users-…, E--…; a demo's sample-project is not)
        for name in Path(row["source_path"]).parts[:-1]:
            if re.match(r"^(-|[A-Za-z]--)", name) and row["format"] == "claude":
                assert name in {claude_dirname(c) for c in cwds}, (row["local_file"], name)
                checked.append(name)
        # folders the session itself read or wrote: Claude Code's memory, Pi's sessions
        for name in re.findall(r"\.claude/projects/([A-Za-z0-9-]+)/", text):
            assert name in {claude_dirname(c) for c in cwds}, (row["local_file"], name)
            checked.append(name)
        for name in re.findall(r"\.(?:pi|omp)/agent/(?:sessions|memories)/(--[^/\"\\]+--)/", text):
            assert name in {omp_dirname(c) for c in cwds}, (row["local_file"], name)
            checked.append(name)
    assert {
        "-Users-xuwentao",
        "E--CC-test",
        "-Users-sarthiborkar-Build-FundWise",
        "--Users-badlogic-workspaces-pi-mono--",
    } <= set(checked)


def test_the_sample_archives_claude_folder_is_its_sessions_cwd() -> None:
    folder = Path(__file__).resolve().parents[2] / "data" / "sample-archive" / "claude" / "projects"
    for project in folder.iterdir():
        for session in project.glob("*.jsonl"):
            assert project.name in {claude_dirname(c) for c in _cwds(session)}


# -- blocks and owned files ---------------------------------------------------------------


@pytest.mark.parametrize(
    "before",
    [
        "# My notes\n- use pnpm\n",
        "no final newline",
        "windows\r\nlines\r\n",
        "",
        "\n\n",
        "<!-- not memkiln -->\n# x\n",
    ],
)
def test_the_block_comes_out_leaving_the_users_bytes_exactly(before: str) -> None:
    once = splice(before, "- first")
    assert once.startswith("<!-- memkiln:begin")
    assert unsplice(once) == (before, False)
    again = splice(once, "- second\n- lines")
    assert "- first" not in again and again.count("<!-- memkiln:begin") == 1
    assert unsplice(again) == (before, False)


def test_a_file_memkiln_created_for_its_block_says_so() -> None:
    text = splice(None, "- mine")
    assert unsplice(text) == ("", True)
    assert unsplice(splice(text, "- again")) == ("", True)  # kept across publishes
    # the agent added its own notes below: they stay
    assert unsplice(text + "- claude's note\n") == ("- claude's note\n", True)


def test_a_block_without_its_end_line_is_refused() -> None:
    text = splice("# notes\n", "- x").replace("<!-- memkiln:end -->\n", "")
    with pytest.raises(BrokenBlockError):
        unsplice(text)


def test_an_owned_file_is_told_from_an_edited_one_and_from_a_foreign_one() -> None:
    text = owned("hello\nworld")
    assert ownership(text) == "owned"
    assert ownership(text.replace("world", "there")) == "edited"
    assert ownership("hello\n") == "foreign"
    assert ownership("") == "foreign"


# -- what the agents load -------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        "v1\n# Memory summary: x\n",
        f"v1\n{MEMORY_GUIDANCE}\n# Memory summary: x\n",
        f"{MEMORY_GUIDANCE}\nv1\n\n# Memory summary: x\n",
        f"v1\n# Memory summary: x\n\n{MEMORY_GUIDANCE}\n",
        f"{MEMORY_GUIDANCE}\n\n# Memory summary: x\n\nMEMORY.md and rollout_summaries/ hold "
        "the details and the sessions each line comes from.\n",
    ],
)
def test_a_summary_loses_its_format_line_title_and_guidance_not_its_content(head: str) -> None:
    lines = summary_lines(f"{head}\n\n## Do\n- a\n- v1 of the API\n")
    assert lines == ["## Do", "- a", "- v1 of the API"]
    # a model's summary without sections keeps its text
    assert summary_lines(f"v1\n{MEMORY_GUIDANCE}\nUse pnpm.\n\n\nKeep it short.\n") == [
        "Use pnpm.",
        "",
        "Keep it short.",
    ]


def test_claudes_block_opens_with_the_guidance_once_and_holds_no_secret() -> None:
    with_line = SUMMARY.replace("v1\n", f"v1\n{MEMORY_GUIDANCE}\n")
    for text in (SUMMARY, with_line):
        block = claude_block(memory(summary=text), rest="", rules=rules())
        assert block is not None
        assert block.splitlines()[0] == MEMORY_GUIDANCE
        assert block.count(MEMORY_GUIDANCE) == 1
        assert "Use pnpm, never npm." in block and "memkiln.md" in block
        assert TOKEN not in block


@pytest.mark.parametrize("user_lines", [0, 150, 190, 195])
def test_claudes_file_stays_within_what_claude_code_loads(user_lines: int) -> None:
    rest = "".join(f"- note {i}\n" for i in range(user_lines))
    long = SUMMARY + "".join(f"- extra line {i}\n" for i in range(300))
    block = claude_block(memory(summary=long), rest=rest, rules=rules())
    assert block is not None
    text = splice(rest or None, block)
    assert line_count(text) <= CLAUDE_LOADED_LINES
    assert len(text.encode()) <= CLAUDE_LOADED_BYTES
    assert unsplice(text)[0] == rest
    assert text.splitlines()[1] == MEMORY_GUIDANCE  # after the begin marker


def test_claudes_block_leaves_a_full_file_alone() -> None:
    assert claude_block(memory(), rest="- n\n" * 199, rules=rules()) is None
    assert claude_block(memory(), rest="x" * (CLAUDE_LOADED_BYTES - 100), rules=rules()) is None


def test_files_memkiln_owns_open_with_the_guidance_and_hold_no_secret() -> None:
    m = memory()
    for text in (
        claude_topic(m, rules=rules()),
        omp_summary(m, rules=rules()),
        omp_details(m, rules=rules()),
    ):
        assert text.splitlines()[0] == MEMORY_GUIDANCE
        assert text.count(MEMORY_GUIDANCE) == 1
        assert TOKEN not in text and "[REDACTED_SECRET]" in text


def test_codex_gets_one_summary_within_its_budget_whatever_the_projects() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    many = [
        memory(
            f"github.com/a/p{i:03d}",
            SUMMARY + "".join(f"- lesson {i}.{j} " + "word " * 30 + "\n" for j in range(20)),
            last_active=start + timedelta(days=i),
        )
        for i in range(300)
    ]
    text = codex_summary(many, index="/srv/memories/INDEX.md", rules=rules())
    assert len(text.encode()) <= CODEX_BYTES and count_tokens(text) <= CODEX_TOKENS
    assert text.splitlines()[0] == MEMORY_GUIDANCE and text.count(MEMORY_GUIDANCE) == 1
    assert TOKEN not in text
    # the most recent project first, with a line pointing at its folder
    first = text.index("github.com/a/p299")
    assert first < text.index("github.com/a/p298")
    assert "Folder: /srv/memories/github.com-a-p299/memory_summary.md" in text
    # the projects that did not fit are counted, pointing at the index
    assert re.search(r"- … \d+ more projects: /srv/memories/INDEX.md", text)


def test_codex_names_every_project_when_they_fit() -> None:
    few = [memory(f"github.com/a/p{i}", last_active=None) for i in range(3)]
    text = codex_summary(few, index="/x/INDEX.md", rules=rules())
    for i in range(3):
        assert f"### github.com/a/p{i} (last active undated)" in text
    assert "more projects" not in text
    assert "- Use pnpm, never npm." in text  # do/avoid lines
    # shared by the three projects: a preference across projects
    assert "## The user's preferences across projects" in text


def test_a_preference_of_one_project_is_not_called_shared() -> None:
    other = SUMMARY.replace("- Use pnpm, never npm.\n", "- Tabs, not spaces.\n")
    shared = shared_preferences([memory("a", SUMMARY), memory("b", other)])
    assert shared == ["- Keep answers short."]


def test_codex_block_beside_codex_own_memory_fits_what_is_left() -> None:
    theirs = "Codex's own summary. " * 400  # ~1,600 tokens
    block = codex_block([memory()], existing=theirs, index="/x/INDEX.md", rules=rules())
    both = splice(theirs, block)
    assert count_tokens(both) <= CODEX_TOKENS + 100  # Codex trims the rest
    assert both.splitlines()[1] == MEMORY_GUIDANCE
    assert unsplice(both)[0] == theirs
