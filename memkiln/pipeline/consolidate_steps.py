"""Phase 2's work, the model's part included: per project, build its files (pure
transforms), ask the model when the backend has one, write what changed under the output
root and record the outcome (``consolidate_project``, ``Consolidation.projects``); then the
projects left without memories and the index. The consolidate flow calls the steps of
``Consolidation`` in order (``memkiln.pipeline.consolidate``)."""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl

from memkiln.constants import HEURISTIC_MODEL
from memkiln.io.memory_files import OutputRoot, UnsafePathError
from memkiln.io.progress import Reporter
from memkiln.io.snapshot import Publisher
from memkiln.io.store import execute, fetch_pl, now, sql
from memkiln.io.untrusted import untrusted_of
from memkiln.io.usage import past_output_mean, record_usage
from memkiln.llm.backends import OpenAIBackend
from memkiln.settings import Settings
from memkiln.transforms.citations import citation_usage
from memkiln.transforms.consolidate import (
    KEY_SHOWN_CHARS,
    deterministic_files,
    heuristic_files,
    input_hash,
    model_files,
    render_index,
    select_memories,
    with_stems,
)
from memkiln.transforms.estimate import (
    CONSOLIDATION_MAX_OUTPUT,
    DEFAULT_CONSOLIDATION_OUTPUT_TOKENS,
    consolidation_input_tokens,
    consolidation_output_tokens,
    expected_output_tokens,
)
from memkiln.transforms.names import project_dirname
from memkiln.transforms.prompts import build_consolidation_input
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.sending import dollars
from memkiln.transforms.states import FailureReason, ProjectStatus, WriteFailure
from memkiln.transforms.summaries import ConsolidateSummary
from memkiln.transforms.text import one_line
from memkiln.transforms.trust import filter_lines

#: Renders the heuristic files of the given projects, in order: ``(key, selected)`` pairs in,
#: ``(key, {path: text})`` pairs out.
Renderer = Callable[[list[tuple[str, pl.DataFrame]]], Iterator[tuple[str, dict[str, str]]]]

#: The files and folders consolidation writes in a project's folder (removed when the
#: project has no memories left).
GENERATED = ("raw_memories.md", "MEMORY.md", "memory_summary.md", "rollout_summaries", "skills")

#: Why a project's files could not be written: fixed reasons, by the operating system's error.
WRITE_REASONS = {
    errno.ENOSPC: WriteFailure.DISK_FULL,
    errno.EDQUOT: WriteFailure.DISK_FULL,
    errno.EFBIG: WriteFailure.DISK_FULL,
    errno.EACCES: WriteFailure.PERMISSION_DENIED,
    errno.EPERM: WriteFailure.PERMISSION_DENIED,
    errno.EROFS: WriteFailure.PERMISSION_DENIED,
}


def write_failure(exc: Exception, *, rules: RuleSet) -> tuple[str, str]:
    """The fixed reason and a one-line, redacted detail of a failure to write memory files:
    ``unsafe_path`` (a link or a path outside the root), ``disk_full``,
    ``permission_denied``, else ``write_error``."""
    if isinstance(exc, UnsafePathError):
        reason = WriteFailure.UNSAFE_PATH
        detail = str(exc)
    else:
        reason = WRITE_REASONS.get(getattr(exc, "errno", None) or 0, WriteFailure.WRITE_ERROR)
        name = getattr(exc, "filename", None)
        detail = f"{getattr(exc, 'strerror', None) or exc}" + (f": {name}" if name else "")
    return reason, redact_text(one_line(detail, 300), rules=rules)


@dataclass
class ProjectOutcome:
    """What consolidation did to one project's folder."""

    project_key: str
    folder: str
    status: ProjectStatus
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    reason: str | None = None
    detail: str | None = None
    input_hash: str | None = None
    selected_ids: list[str] = field(default_factory=list)
    requests: int = 0  # model requests sent for this project
    input_tokens: int = 0
    output_tokens: int = 0
    #: memory lines the risk and copied-instruction filters dropped, per reason
    dropped: Counter[str] = field(default_factory=Counter)


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
    untrusted: frozenset[str] = frozenset(),
) -> ProjectOutcome:
    """Bring one project's folder up to date with its selected memories.

    ``affordable`` is asked, with the request's input tokens, before the model is called: when
    it says no, nothing is written and the project is ``deferred`` to the next run.
    ``rendered`` gives the heuristic backend's files when they were rendered elsewhere (a
    task); it is only called when the project is not up to date.
    """
    folder = project_dirname(project_key)
    digest = input_hash(selected, backend=backend_name, model=model)
    outcome = ProjectOutcome(project_key, folder, ProjectStatus.SUCCEEDED, input_hash=digest)
    outcome.selected_ids = sorted(selected["rollout_id"].to_list())
    if up_to_date(root, project_key, digest, previous_hash):
        outcome.status = ProjectStatus.SKIPPED
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
            outcome.status = ProjectStatus.DEFERRED
            outcome.reason = FailureReason.BUDGET
            return outcome
        result = await backend.consolidate(prompt)
        outcome.requests = int(result.reason != FailureReason.CONTEXT_OVERFLOW)
        outcome.input_tokens, outcome.output_tokens = result.input_tokens, result.output_tokens
        if result.output is None:
            outcome.status = ProjectStatus.FAILED
            outcome.reason, outcome.detail = result.reason, result.detail
            return outcome
        consolidated, skipped = model_files(result.output, rules=rules)
        if skipped:
            outcome.detail = "skills with unusable names skipped: " + ", ".join(
                one_line(s, 60) for s in skipped
            )
    files |= {f"{folder}/{k}": v for k, v in consolidated.items()}
    # every backend's output, before anything is written: no risky command is recommended and
    # no instruction copied from a tool's output or an injected text is kept
    for rel, text in files.items():
        files[rel], dropped = filter_lines(text, untrusted)
        outcome.dropped.update(dropped)
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


class Consolidation:
    """One phase-2 run over an open store and output root: its settings, backend (None for
    the heuristic backend), summary, and what the steps share (the selected memories, each
    project's last record)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        root: OutputRoot,
        settings: Settings,
        backend: OpenAIBackend | None,
        *,
        rules: RuleSet,
        summary: ConsolidateSummary,
        reporter: Reporter,
        spent_before: float = 0.0,
    ) -> None:
        self.con = con
        self.root = root
        self.settings = settings
        self.backend = backend
        self.rules = rules
        self.summary = summary
        self.reporter = reporter
        self.spent_before = spent_before
        self.backend_name = "openai" if backend else "heuristic"
        self.model = backend.model if backend else HEURISTIC_MODEL
        #: set by ``select``: every project's selected memories, and each project's last
        #: consolidation record
        self.selected = pl.DataFrame()
        self.previous: dict[str, dict[str, Any]] = {}

    # -- 2. select ---------------------------------------------------------------------------

    def select(self, only: str | None) -> list[str]:
        """Select each project's memories; returns the projects to consolidate (``only``: the
        one project of that key or folder name)."""
        inputs = fetch_pl(self.con, sql("consolidation_inputs"))
        usage = citation_usage(fetch_pl(self.con, sql("citing_items")).lazy())
        limit = self.settings.max_memories_per_project
        self.selected = with_stems(select_memories(inputs.lazy(), usage, limit=limit).collect())
        jobs = fetch_pl(self.con, sql("consolidation_state"))
        self.previous = {row["project_key"]: row for row in jobs.iter_rows(named=True)}
        keys = sorted(set(self.selected["project_key"].to_list()))
        if only is not None:
            keys = [k for k in keys if only in (k, project_dirname(k))]
        return keys

    # -- 3. per project ----------------------------------------------------------------------

    async def projects(self, keys: list[str], *, render: Renderer | None = None) -> None:
        """Bring each project's folder up to date and record it (readers see the projects
        recorded so far); with a renderer (the heuristic backend), the files of the projects
        that changed are rendered ahead, in order."""
        summary = self.summary
        affordable = self._affordable()
        publisher = Publisher(self.con)
        per_key = {key: self.selected.filter(pl.col("project_key") == key) for key in keys}
        rendered: RenderedAhead | None = None
        if render is not None and self.backend is None:
            stale = [
                (key, per_key[key])
                for key in keys
                if not self._up_to_date(key, per_key[key], self.previous.get(key) or {})
            ]
            rendered = RenderedAhead(render(stale))
        with self.reporter.task("consolidate", total=len(keys), unit="projects") as advance:
            for key in keys:
                prev = self.previous.get(key) or {}
                ok_before = prev.get("status") == ProjectStatus.SUCCEEDED
                try:
                    outcome = await consolidate_project(
                        self.root,
                        key,
                        per_key[key],
                        previous_ids=list(prev.get("selected_ids") or []) if ok_before else [],
                        previous_hash=prev.get("input_hash") if ok_before else None,
                        backend=self.backend,
                        backend_name=self.backend_name,
                        model=self.model,
                        context_window=self.settings.context_window,
                        rules=self.rules,
                        affordable=_refuse if summary.stopped else affordable,
                        rendered=(
                            rendered.taker(key, per_key[key]) if rendered is not None else None
                        ),
                        untrusted=self._untrusted(per_key[key]),
                    )
                except (OSError, UnsafePathError) as exc:  # this project only; the others go on
                    reason, detail = write_failure(exc, rules=self.rules)
                    outcome = ProjectOutcome(
                        key,
                        project_dirname(key),
                        ProjectStatus.FAILED,
                        reason=reason,
                        detail=detail,
                    )
                record_project(self.con, outcome, self.backend_name, self.model, prev)
                publisher.maybe()
                self._count(key, outcome)
                advance(1)

    def _untrusted(self, selected: pl.DataFrame) -> frozenset[str]:
        """The imperative sentences of the project's sessions that nobody typed (those the
        user typed too left out): lines holding one are dropped from its memory."""
        return untrusted_of(self.con, selected["rollout_id"].to_list())  # read in batches

    def _affordable(self) -> Callable[[int], bool] | None:
        """Whether a project's request, of so many input tokens, fits the budget with what
        was spent (None: no budget, or no model)."""
        backend, budget = self.backend, self.settings.budget_usd
        if backend is None or budget is None:
            return None
        summary = self.summary
        past = past_output_mean(self.con, phase="consolidate", model=self.model)
        out_each = expected_output_tokens(
            past, default=DEFAULT_CONSOLIDATION_OUTPUT_TOKENS, limit=CONSOLIDATION_MAX_OUTPUT
        )

        def affordable(tokens_in: int) -> bool:
            # the worst case: every output token the request may ask for
            most = consolidation_output_tokens(tokens_in, self.settings.context_window)
            cost = backend.cost(tokens_in, max(out_each, most or 0)) or 0.0
            spent = self.spent_before + summary.cost_usd
            if spent + cost <= budget:
                return True
            summary.stopped = (
                f"budget of {dollars(budget)} reached: ${spent:,.4f} spent so far, the next "
                f"project ~${cost:,.4f}; the projects left are consolidated by the next run"
            )
            return False

        return affordable

    def _up_to_date(self, key: str, selected: pl.DataFrame, prev: dict[str, object]) -> bool:
        """The heuristic backend's check of ``consolidate_project``, made before rendering."""
        if prev.get("status") != ProjectStatus.SUCCEEDED:
            return False
        digest = input_hash(selected, backend="heuristic", model=self.model)
        previous = prev.get("input_hash")
        return up_to_date(self.root, key, digest, previous if isinstance(previous, str) else None)

    def _count(self, key: str, outcome: ProjectOutcome) -> None:
        """Add a project's outcome to the summary: its status, requests, tokens and cost,
        files written and removed, and why it failed."""
        summary, backend = self.summary, self.backend
        summary.projects[key] = outcome.status
        summary.requests += outcome.requests
        summary.input_tokens += outcome.input_tokens
        summary.output_tokens += outcome.output_tokens
        if outcome.requests and backend is not None:
            cost = backend.cost(outcome.input_tokens, outcome.output_tokens)
            if cost is None:
                summary.price_known = False
            else:
                summary.cost_usd += cost
        summary.written += len(outcome.written)
        for reason, n in outcome.dropped.items():
            summary.dropped[reason] = summary.dropped.get(reason, 0) + n
        summary.removed += len(outcome.removed)
        if outcome.status == ProjectStatus.FAILED:
            self._fail(key, outcome.reason, outcome.detail)

    def _fail(self, key: str, reason: str | None, detail: str | None) -> None:
        """Count a project (or the index) that could not be written, with one line saying
        why."""
        self.summary.projects_failed += 1
        line = f"{reason or 'failed'}: {detail}" if detail else (reason or "failed")
        self.summary.failures[one_line(key, KEY_SHOWN_CHARS)] = line

    # -- 4. projects left without memories, the index ----------------------------------------

    def remove_stale(self, keys: list[str]) -> None:
        """Remove the files of projects that have no memories left (``keys`` are those that
        have some), and record them ``empty``."""
        summary = self.summary
        for key, prev in self.previous.items():
            if key in keys or prev.get("status") == ProjectStatus.EMPTY:
                continue
            try:
                removed = [
                    f"{prev['folder']}/{name}" for name in GENERATED
                    if self.root.remove(f"{prev['folder']}/{name}")
                ]  # fmt: skip
            except (OSError, UnsafePathError) as exc:
                reason, detail = write_failure(exc, rules=self.rules)
                summary.projects[key] = ProjectStatus.FAILED
                self._fail(key, reason, detail)
                continue
            outcome = ProjectOutcome(key, prev["folder"], ProjectStatus.EMPTY, removed=removed)
            record_project(self.con, outcome, self.backend_name, self.model, prev)
            summary.projects[key] = ProjectStatus.EMPTY
            summary.removed += len(removed)

    def write_index(self) -> None:
        """INDEX.md: every project with memories, its folder and sessions."""
        sessions = fetch_pl(self.con, sql("project_sessions"))
        memories = self.selected.group_by("project_key").agg(memories=pl.len())
        index = sessions.join(memories, on="project_key", how="inner").with_columns(
            folder=pl.col("project_key").map_batches(_folders, return_dtype=pl.String)
        )
        try:
            self.root.write("INDEX.md", render_index(index))
        except (OSError, UnsafePathError) as exc:
            self._fail("INDEX.md", *write_failure(exc, rules=self.rules))

    # -- 5. close ----------------------------------------------------------------------------

    async def close(self) -> None:
        """This run's model usage recorded; the backend's connections closed."""
        summary = self.summary
        if summary.requests:
            record_usage(
                self.con,
                run_id=summary.run_id,
                kind="actual",
                phase="consolidate",
                backend=self.backend_name,
                model=self.model,
                requests=summary.requests,
                input_tokens=summary.input_tokens,
                output_tokens=summary.output_tokens,
                cost_usd=summary.cost_usd if summary.price_known else None,
            )
        if self.backend is not None:
            await self.backend.aclose()


class RenderedAhead:
    """Files rendered ahead, taken project by project in the same order."""

    def __init__(self, stream: Iterator[tuple[str, dict[str, str]]]) -> None:
        self._stream = stream
        self._next: tuple[str, dict[str, str]] | None = None

    def taker(self, key: str, selected: pl.DataFrame) -> Callable[[], dict[str, str]]:
        def take() -> dict[str, str]:
            if self._next is None:
                self._next = next(self._stream, None)
            if self._next is not None and self._next[0] == key:
                files, self._next = self._next[1], None
                return files
            # not rendered ahead (its folder changed since the check): render it here
            return heuristic_files(key, selected)

        return take


def record_project(
    con: duckdb.DuckDBPyConnection,
    outcome: ProjectOutcome,
    backend: str,
    model: str,
    prev: dict[str, Any],
) -> None:
    """Store a project's consolidation outcome (a skipped project keeps its record, and so
    does one deferred by the budget: the next run sees its inputs changed)."""
    if outcome.status in (ProjectStatus.SKIPPED, ProjectStatus.DEFERRED):
        return
    succeeded = outcome.status in (ProjectStatus.SUCCEEDED, ProjectStatus.EMPTY)
    execute(
        con,
        "record_consolidation",
        key=outcome.project_key,
        folder=outcome.folder,
        status=outcome.status,
        hash=outcome.input_hash if succeeded else prev.get("input_hash"),
        ids=outcome.selected_ids if succeeded else prev.get("selected_ids"),
        backend=backend,
        model=model,
        memories=len(outcome.selected_ids),
        written=len(outcome.written),
        removed=len(outcome.removed),
        success_at=now() if succeeded else None,
        reason=outcome.reason,
        error=outcome.detail,
        at=now(),
    )


def _refuse(tokens_in: int) -> bool:
    """Once the budget is reached, no project calls the model any more in this run."""
    return False


def _folders(keys: pl.Series) -> pl.Series:
    return pl.Series([project_dirname(k) for k in keys.to_list()], dtype=pl.String)
