"""Phase 2 for one project: build its files (pure transforms), ask the model when the
backend has one, and write what changed under the output root."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from memkiln.io.memory_files import OutputRoot, UnsafePathError
from memkiln.llm.backends import OpenAIBackend
from memkiln.transforms.consolidate import (
    MEMORY_SUMMARY_MAX_TOKENS,
    deterministic_files,
    heuristic_consolidation,
)
from memkiln.transforms.estimate import consolidation_input_tokens
from memkiln.transforms.names import project_dirname, skill_dirname
from memkiln.transforms.outputs import ConsolidationOutput
from memkiln.transforms.prompts import (
    CONSOLIDATION_PROMPT_VERSION,
    build_consolidation_input,
)
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.text import one_line
from memkiln.transforms.tokens import count_tokens, truncate_middle

#: Why a project's files could not be written: fixed reasons, by the operating system's error.
WRITE_REASONS = {
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EFBIG: "disk_full",
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.EROFS: "permission_denied",
}


def write_failure(exc: Exception, *, rules: RuleSet) -> tuple[str, str]:
    """The fixed reason and a one-line, redacted detail of a failure to write memory files:
    ``unsafe_path`` (a link or a path outside the root), ``disk_full``,
    ``permission_denied``, else ``write_error``."""
    if isinstance(exc, UnsafePathError):
        reason = "unsafe_path"
        detail = str(exc)
    else:
        reason = WRITE_REASONS.get(getattr(exc, "errno", None) or 0, "write_error")
        name = getattr(exc, "filename", None)
        detail = f"{getattr(exc, 'strerror', None) or exc}" + (f": {name}" if name else "")
    return reason, redact_text(one_line(detail, 300), rules=rules)


@dataclass
class ProjectOutcome:
    """What consolidation did to one project's folder."""

    project_key: str
    folder: str
    status: str  # succeeded | skipped | failed | empty | deferred (over the budget)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reason: str | None = None
    detail: str | None = None
    input_hash: str | None = None
    selected_ids: list[str] = field(default_factory=list)
    requests: int = 0  # model requests sent for this project
    input_tokens: int = 0
    output_tokens: int = 0


def input_hash(selected: pl.DataFrame, *, backend: str, model: str) -> str:
    """Everything a project's files depend on, hashed: a project with the same hash is left
    alone."""
    digest = hashlib.sha256(f"{backend}\0{model}\0{CONSOLIDATION_PROMPT_VERSION}".encode())
    ordered = selected.sort("rollout_id").select(
        "rollout_id", "stem", "rank", "cwd", "input_hash", "raw_memory", "rollout_summary"
    )
    for row in ordered.iter_rows():
        digest.update("\0".join("" if v is None else str(v) for v in row).encode())
        digest.update(b"\1")
    return digest.hexdigest()


def _skill_file(name: str, description: str, body: str) -> str:
    one_line = " ".join(description.split())
    return f"---\nname: {name}\ndescription: {one_line}\n---\n\n{body.strip()}\n"


def model_files(output: ConsolidationOutput, *, rules: RuleSet) -> tuple[dict[str, str], list[str]]:
    """The files of a model's answer, redacted, with safe names; and the skipped names."""
    summary = redact_text(output.memory_summary_md, rules=rules).strip()
    if not summary.startswith("v1"):
        summary = "v1\n" + summary
    summary, _ = truncate_middle(summary + "\n", MEMORY_SUMMARY_MAX_TOKENS)
    files = {
        "MEMORY.md": redact_text(output.memory_md, rules=rules).strip() + "\n",
        "memory_summary.md": summary if summary.endswith("\n") else summary + "\n",
    }
    skipped = []
    for skill in output.skills:
        # the name is redacted before it becomes a folder, and the folder name again after
        # (sanitizing must not turn a name into something a secret rule matches)
        name = skill_dirname(redact_text(skill.name, rules=rules))
        if name is not None and redact_text(name, rules=rules) != name:
            name = None
        if name is None or f"skills/{name}/SKILL.md" in files:
            skipped.append(redact_text(skill.name, rules=rules))
            continue
        files[f"skills/{name}/SKILL.md"] = _skill_file(
            name,
            redact_text(skill.description, rules=rules),
            redact_text(skill.body, rules=rules),
        )
    return files, skipped


def heuristic_files(project_key: str, selected: pl.DataFrame) -> dict[str, str]:
    """Every file of a project's folder under the heuristic backend, by path under the
    output root: pure work on the project's selected memories, so it can run as a task
    anywhere (``memkiln.flows.consolidate.render_task``)."""
    folder = project_dirname(project_key)
    files = {f"{folder}/{k}": v for k, v in deterministic_files(project_key, selected).items()}
    consolidated = heuristic_consolidation(project_key, selected)
    return files | {f"{folder}/{k}": v for k, v in consolidated.items()}


def up_to_date(root: OutputRoot, project_key: str, digest: str, previous_hash: str | None) -> bool:
    """The project's inputs are those of its last success and its files are there."""
    folder = project_dirname(project_key)
    return digest == previous_hash and root.path(f"{folder}/memory_summary.md").exists()


async def consolidate_project(
    root: OutputRoot,
    project_key: str,
    selected: pl.DataFrame,
    *,
    previous_ids: list[str],
    previous_hash: str | None,
    backend: OpenAIBackend | None,
    backend_name: str,
    model: str,
    context_window: int | None,
    rules: RuleSet,
    affordable: Callable[[int], bool] | None = None,
    rendered: Callable[[], dict[str, str]] | None = None,
) -> ProjectOutcome:
    """Bring one project's folder up to date with its selected memories.

    ``affordable`` is asked, with the request's input tokens, before the model is called: when
    it says no, nothing is written and the project is ``deferred`` to the next run.
    ``rendered`` gives the heuristic backend's files when they were rendered elsewhere (a
    task); it is only called when the project is not up to date.
    """
    folder = project_dirname(project_key)
    digest = input_hash(selected, backend=backend_name, model=model)
    outcome = ProjectOutcome(project_key, folder, "succeeded", input_hash=digest)
    outcome.selected_ids = sorted(selected["rollout_id"].to_list())
    if up_to_date(root, project_key, digest, previous_hash):
        outcome.status = "skipped"
        return outcome
    if backend is None:
        files = rendered() if rendered is not None else heuristic_files(project_key, selected)
        consolidated: dict[str, str] = {}
    else:
        files = {f"{folder}/{k}": v for k, v in deterministic_files(project_key, selected).items()}
        added_rows = selected.filter(~pl.col("rollout_id").is_in(previous_ids))
        removed_ids = sorted(set(previous_ids) - set(outcome.selected_ids))
        added = "\n\n".join(
            f"### {stem} (rollout {rid})\n\n{raw.strip()}"
            for rid, stem, raw in added_rows.select("rollout_id", "stem", "raw_memory").iter_rows()
        )
        prompt = build_consolidation_input(
            project_key=project_key,
            current_memory=root.read(f"{folder}/MEMORY.md"),
            current_summary=root.read(f"{folder}/memory_summary.md"),
            added=added,
            removed="\n".join(f"- rollout {rid}" for rid in removed_ids),
            summary_files=[f"{s}.md" for s in selected["stem"].to_list()],
            context_window=context_window,
        )
        if affordable is not None and not affordable(consolidation_input_tokens(prompt)):
            outcome.status = "deferred"
            outcome.reason = "budget"
            return outcome
        result = await backend.consolidate(prompt)
        outcome.requests = int(result.reason != "context_overflow")
        outcome.input_tokens, outcome.output_tokens = result.input_tokens, result.output_tokens
        if result.output is None:
            outcome.status = "failed"
            outcome.reason, outcome.detail = result.reason, result.detail
            return outcome
        consolidated, skipped = model_files(result.output, rules=rules)
        if skipped:
            outcome.detail = "skills with unusable names skipped: " + ", ".join(
                one_line(s, 60) for s in skipped
            )
    files |= {f"{folder}/{k}": v for k, v in consolidated.items()}
    # write every file (only changed bytes touch the disk), then remove what left the selection
    for rel, text in sorted(files.items()):
        if root.write(rel, text):
            outcome.written.append(rel)
    keep_summaries = {
        rel.rsplit("/", 1)[1] for rel in files if rel.startswith(f"{folder}/rollout_summaries/")
    }
    outcome.removed += root.prune(f"{folder}/rollout_summaries", keep=keep_summaries)
    keep_skills = {rel.split("/")[2] for rel in files if rel.startswith(f"{folder}/skills/")}
    outcome.removed += root.prune_dirs(f"{folder}/skills", keep=keep_skills)
    return outcome


def summary_tokens_ok(root: OutputRoot, folder: str) -> bool:
    text = root.read(f"{folder}/memory_summary.md") or ""
    return text.startswith("v1") and count_tokens(text) <= MEMORY_SUMMARY_MAX_TOKENS
