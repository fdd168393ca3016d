"""Score memory files and stored outcomes against hand labels (tests/data/memory_labels.toml).

Used by ``bench/quality.py`` (printed as a table) and by the corpus test that holds the
acceptance bar. Reads only the store (read-only) and the memory files, so any version of
memkiln can be scored.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

LABELS = Path(__file__).parent / "data" / "memory_labels.toml"

#: Headings of the sections that present commands as worked, and of those that present the
#: user's preferences, decisions and facts.
WORKED_SECTION = re.compile(r"(?i)^#+ .*(?:commands? that (?:worked|exited 0))")
PREFERENCE_SECTION = re.compile(r"(?i)^#+ .*(?:preference|decision|fact)")


@dataclass
class Score:
    outcomes: int = 0
    outcomes_right: int = 0
    failed_labelled: int = 0
    failed_shown_as_worked: list[str] = field(default_factory=list)
    one_off_labelled: int = 0
    false_preferences: list[str] = field(default_factory=list)
    preferences_labelled: int = 0
    preferences_found: int = 0
    preferences_missed: list[str] = field(default_factory=list)
    outcome_misses: list[str] = field(default_factory=list)

    @property
    def outcome_accuracy(self) -> float:
        return self.outcomes_right / self.outcomes if self.outcomes else 0.0

    @property
    def preference_recall(self) -> float:
        return (
            self.preferences_found / self.preferences_labelled if self.preferences_labelled else 0.0
        )


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def _section_lines(text: str, heading: re.Pattern[str]) -> list[str]:
    """Lines under headings that match ``heading`` (up to the next heading), plus bullets that
    carry the section's name inline (``Commands that worked: …``, ``Decision: …``)."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            inside = bool(heading.search(line))
            continue
        if inside or heading.search("# " + line.lstrip("- ").split(":", 1)[0]):
            out.append(line)
    return out


def score(db: Path, out: Path, labels: Path = LABELS) -> Score:
    sessions = tomllib.loads(labels.read_text("utf-8"))["session"]
    result = Score()
    with duckdb.connect(str(db), read_only=True) as con:
        for label in sessions:
            row = con.execute(
                """
                select r.rollout_id, r.project_key, j.status, o.raw_memory
                from rollouts r
                left join stage1_jobs j using (rollout_id)
                left join stage1_outputs o using (rollout_id)
                where r.path like '%/' || $file
                """,
                {"file": label["file"]},
            ).fetchone()
            if row is None:
                raise LookupError(f"{label['file']} is not in {db}")
            _, project_key, status, raw = row
            folder = _project_folder(con, project_key, out)
            files = {p.name: p.read_text("utf-8") for p in folder.rglob("*.md")} if folder else {}
            summary = files.get("memory_summary.md", "")
            if "outcome" in label:
                result.outcomes += 1
                got = "noop" if status == "succeeded_no_output" or not raw else _outcome(raw)
                if got == label["outcome"]:
                    result.outcomes_right += 1
                else:
                    result.outcome_misses.append(f"{label['file']}: {got} != {label['outcome']}")
            worked = [
                _flat(line)
                for text in files.values()
                for line in _section_lines(text, WORKED_SECTION)
            ]
            for command in label.get("failed", []):
                result.failed_labelled += 1
                if any(_flat(command) in line for line in worked):
                    result.failed_shown_as_worked.append(command)
            stated = [
                _flat(line)
                for text in files.values()
                for line in _section_lines(text, PREFERENCE_SECTION)
            ]
            for request in label.get("one_off", []):
                result.one_off_labelled += 1
                if any(_flat(request) in line for line in stated):
                    result.false_preferences.append(request)
            for preference in label.get("preferences", []):
                result.preferences_labelled += 1
                if _flat(preference) in _flat(summary):
                    result.preferences_found += 1
                else:
                    result.preferences_missed.append(preference)
    return result


def _outcome(raw: str) -> str:
    found = re.search(r"(?m)^task_outcome:\s*(\S+)", raw)
    return found.group(1) if found else "uncertain"


def _project_folder(con: duckdb.DuckDBPyConnection, project_key: str, out: Path) -> Path | None:
    """The project's memory folder: the INDEX.md row that names the project."""
    index = out / "INDEX.md"
    if not index.exists() or not project_key:
        return None
    shown = project_key.replace("|", "/")
    for line in index.read_text("utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1] == shown:
            found = re.search(r"\[([^\]]+)\]", cells[2])
            if found:
                return out / found.group(1)
    return None
