"""Publishing (``memkiln publish``, and the last phase of ``memkiln run --publish``). Nothing
here imports Prefect.

1. read the projects consolidate wrote (their folder under ``--out`` and the directories
   their sessions ran in) from the store
2. publish (or take back, ``--remove``) each agent's files (``memkiln.io.publish``)
3. record what was placed where (``publications``) and the run; a dry run records nothing
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from memkiln.errors import ConfigError
from memkiln.io.progress import Reporter
from memkiln.io.publish import Project, publish_targets
from memkiln.io.rules import load_rules
from memkiln.io.run_records import recorded_run
from memkiln.io.store import execute, now, open_store
from memkiln.pipeline.runner import Runner
from memkiln.settings import Settings
from memkiln.transforms.publish import TARGETS, ProjectMemory, PublishSummary
from memkiln.transforms.redact import RuleSet, redact_text


def read_projects(con: duckdb.DuckDBPyConnection, out: Path) -> list[Project]:
    """Every consolidated project whose folder under ``out`` holds a memory_summary.md."""
    projects = []
    for key, folder, last_active, cwds in execute(con, "publish_projects").fetchall():
        path = (out / folder).resolve()
        try:
            summary = (path / "memory_summary.md").read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        try:
            details = (path / "MEMORY.md").read_text(encoding="utf-8")
        except FileNotFoundError:
            details = ""
        memory = ProjectMemory(key, str(path), summary, details, last_active)
        projects.append(Project(memory, tuple(cwds)))
    return projects


def _named(con: duckdb.DuckDBPyConnection, projects: list[Project], query: str) -> list[Project]:
    from memkiln.io.status import find_project

    key, _ = find_project(con, query)
    chosen = [p for p in projects if p.memory.key == key]
    if not chosen:
        raise ConfigError(
            f"project {key} has no consolidated memory to publish; run 'memkiln consolidate' "
            "first ('memkiln projects' shows its memories)"
        )
    return chosen


def _status(summary: PublishSummary, action: str) -> str:
    if action == "skip":
        return "skipped"
    if action == "remove" or (summary.remove and action == "change"):
        return "removed"
    return "published"


def record_steps(con: duckdb.DuckDBPyConnection, summary: PublishSummary, rules: RuleSet) -> None:
    """One ``publications`` row per file the publish looked at."""
    at = now()
    for step in summary.steps:
        if step.kind == "folder":
            continue
        execute(
            con,
            "record_publication",
            target=step.target,
            path=redact_text(step.path, rules=rules),
            project=step.project_key,
            kind=step.kind,
            status=_status(summary, step.action),
            action=step.action,
            reason=redact_text(step.reason, rules=rules) if step.reason else None,
            bytes=step.size,
            at=at,
            run_id=summary.run_id,
        )


def publish_store(
    settings: Settings,
    *,
    targets: Sequence[str] | None = None,
    remove: bool = False,
    project: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PublishSummary:
    """Publish the store's projects to ``targets`` (default: the ``publish`` setting, else
    every agent); a dry run (``settings.dry_run``) writes nothing."""
    chosen = list(targets or settings.publish or TARGETS)
    rules = load_rules()
    dry = settings.dry_run
    env = os.environ if env is None else env
    summary = PublishSummary()
    # 1. the projects
    con = open_store(settings.db, read_only=dry)
    try:
        every = read_projects(con, settings.out)
        projects = _named(con, every, project) if project is not None else every
        index = str(settings.out.resolve() / "INDEX.md")

        def publish() -> None:
            # 2. the agents' files
            if not every and not remove:
                summary.lines.append(
                    "nothing to publish: no project has a consolidated memory folder under "
                    f"{settings.out} (run 'memkiln run' or 'memkiln consolidate' first)"
                )
                return
            publish_targets(
                chosen,
                projects,
                every=every,
                only_these=project is not None,
                rules=rules,
                index=index,
                env=env,
                dry_run=dry,
                remove=remove,
                alongside=settings.codex_alongside,
                summary=summary,
            )

        if dry:
            publish()
            return summary
        # 3. recorded
        with recorded_run(con, command="publish", counts=summary.counters) as summary.run_id:
            publish()
            record_steps(con, summary, rules)
    finally:
        con.close()
    return summary


def publish(settings: Settings, *, runner: Runner, reporter: Reporter) -> PublishSummary:
    """The last phase of ``memkiln run`` with the ``publish`` setting: each project's memory
    placed where the agents it names load it."""
    return publish_store(settings, targets=settings.publish)
