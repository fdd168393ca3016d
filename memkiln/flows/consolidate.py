"""Phase 2, consolidation: per project, memory files an agent can load.

1. open the store and the output root (temporaries of a killed run are removed)
2. select each project's memories (usage from citations, then recency; at most 256)
3. per project whose inputs changed since its last success: write raw_memories.md and
   rollout_summaries/, then MEMORY.md and memory_summary.md (heuristic or model, with
   skills from a model), removing files of memories that left the selection; under Prefect
   the heuristic backend's files of each project are rendered by a ``render-project`` task
   on the flow's task runner (Dask workers included), and this process writes them
4. clear the folders of projects left without memories; write INDEX.md
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import polars as pl
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture

from memkiln.flows.ephemeral import stoppable
from memkiln.io.artifacts import phase_of, publish
from memkiln.io.jobs import store_write_error
from memkiln.io.loader import frame_from_ipc, frame_to_ipc
from memkiln.io.lock import hold_store
from memkiln.io.memory_files import OutputRoot, UnsafePathError
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.io.progress import Reporter
from memkiln.io.rules import load_rules
from memkiln.io.runner import current_runner, ordered_results, parallelism, stopped_with
from memkiln.io.snapshot import Publisher
from memkiln.io.store import fetch_pl, now, open_store, recorded_run, sql
from memkiln.io.usage import past_output_mean, record_usage
from memkiln.llm.backends import OpenAIBackend
from memkiln.llm.consolidation import (
    ProjectOutcome,
    consolidate_project,
    heuristic_files,
    input_hash,
    up_to_date,
    write_failure,
)
from memkiln.settings import Options, Settings
from memkiln.transforms.consolidate import (
    KEY_SHOWN_CHARS,
    render_index,
    select_memories,
    with_stems,
)
from memkiln.transforms.estimate import (
    CONSOLIDATION_MAX_OUTPUT,
    DEFAULT_CONSOLIDATION_OUTPUT_TOKENS,
    expected_output_tokens,
)
from memkiln.transforms.names import project_dirname
from memkiln.transforms.summaries import ConsolidateSummary, consolidate_section, notes
from memkiln.transforms.text import one_line
from memkiln.transforms.usage import citation_usage

#: Renders the heuristic files of the given projects, in order: ``(key, selected)`` pairs in,
#: ``(key, {path: text})`` pairs out.
Renderer = Callable[[list[tuple[str, pl.DataFrame]]], Iterator[tuple[str, dict[str, str]]]]

GENERATED = ("raw_memories.md", "MEMORY.md", "memory_summary.md", "rollout_summaries", "skills")


def consolidate_store(
    settings: Settings,
    *,
    project: str | None = None,
    reporter: Reporter | None = None,
    spent_before: float = 0.0,
    render: Renderer | None = None,
) -> ConsolidateSummary:
    """Run phase 2 over the store (no Prefect; the flow below wraps this). ``spent_before``
    is what earlier phases of the same invocation spent, counted against ``budget_usd``;
    ``render`` renders the heuristic files of projects elsewhere (tasks), else here."""
    reporter = reporter or Reporter(enabled=False)
    rules = load_rules()
    root = OutputRoot(settings.out)
    synchronous = settings.backend in ("openai", "openai-batch")  # phase 2 is synchronous
    if synchronous:
        check_budget_prices(
            PriceBook(settings.prices),
            backend="openai",
            model=settings.model,
            budget=settings.budget_usd,
        )
    backend = OpenAIBackend(settings, rules=rules) if synchronous else None
    con = open_store(settings.db)
    summary = ConsolidateSummary()
    try:
        with recorded_run(con, command="consolidate", counts=summary.counters) as summary.run_id:
            asyncio.run(
                _consolidate(
                    con,
                    root,
                    settings,
                    backend,
                    project,
                    summary,
                    reporter,
                    spent_before,
                    render,
                )
            )
    except duckdb.Error as exc:  # the store cannot be written (a full disk, a lost mount)
        raise store_write_error(settings.db, exc) from exc
    finally:
        con.close()
    return summary


async def _consolidate(
    con: duckdb.DuckDBPyConnection,
    root: OutputRoot,
    settings: Settings,
    backend: OpenAIBackend | None,
    only: str | None,
    summary: ConsolidateSummary,
    reporter: Reporter,
    spent_before: float = 0.0,
    render: Renderer | None = None,
) -> None:
    rules = load_rules()
    # 1. leftovers of a killed run
    root.clean_temporaries()
    # 2. select
    inputs = fetch_pl(con, sql("consolidation_inputs"))
    usage = citation_usage(fetch_pl(con, sql("citing_items")).lazy())
    selected = with_stems(
        select_memories(inputs.lazy(), usage, limit=settings.max_memories_per_project).collect()
    )
    jobs = fetch_pl(con, sql("consolidation_state"))
    previous = {row["project_key"]: row for row in jobs.iter_rows(named=True)}
    keys = sorted(set(selected["project_key"].to_list()))
    if only is not None:
        keys = [k for k in keys if only in (k, project_dirname(k))]
        if not keys:  # nothing to do, and the index stays as it is (the CLI says so)
            if backend is not None:
                await backend.aclose()
            return
    backend_name = "openai" if backend else "heuristic"
    model = backend.model if backend else "heuristic-v1"
    affordable = None
    if backend is not None and settings.budget_usd is not None:
        budget = settings.budget_usd
        past = past_output_mean(con, phase="consolidate", model=model)
        out_each = expected_output_tokens(
            past, default=DEFAULT_CONSOLIDATION_OUTPUT_TOKENS, limit=CONSOLIDATION_MAX_OUTPUT
        )

        def affordable(tokens_in: int) -> bool:
            cost = backend.cost(tokens_in, out_each) or 0.0
            spent = spent_before + summary.cost_usd
            if spent + cost <= budget:
                return True
            summary.stopped = (
                f"budget of ${budget:,.2f} reached: ${spent:,.4f} spent so far, the next "
                f"project ~${cost:,.4f}; the projects left are consolidated by the next run"
            )
            return False

    # 3. per project (readers see the projects recorded so far); with a renderer, the files
    # of the projects that changed are rendered ahead, in order
    publisher = Publisher(con)
    per_key = {key: selected.filter(pl.col("project_key") == key) for key in keys}
    rendered: _Ahead | None = None
    if render is not None and backend is None:
        stale = [
            (key, per_key[key])
            for key in keys
            if not _up_to_date(root, key, per_key[key], previous.get(key) or {}, model)
        ]
        rendered = _Ahead(render(stale))
    with reporter.task("consolidate", total=len(keys)) as advance:
        for key in keys:
            prev = previous.get(key) or {}
            ok_before = prev.get("status") == "succeeded"
            try:
                outcome = await consolidate_project(
                    root,
                    key,
                    per_key[key],
                    previous_ids=list(prev.get("selected_ids") or []) if ok_before else [],
                    previous_hash=prev.get("input_hash") if ok_before else None,
                    backend=backend,
                    backend_name=backend_name,
                    model=model,
                    context_window=settings.context_window,
                    rules=rules,
                    affordable=_refuse if summary.stopped else affordable,
                    rendered=rendered.taker(key, per_key[key]) if rendered is not None else None,
                )
            except (OSError, UnsafePathError) as exc:  # this project only; the others go on
                reason, detail = write_failure(exc, rules=rules)
                outcome = ProjectOutcome(
                    key, project_dirname(key), "failed", reason=reason, detail=detail
                )
            _record(con, outcome, backend_name, model, prev)
            publisher.maybe()
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
            summary.removed += len(outcome.removed)
            if outcome.status == "failed":
                _fail(summary, key, outcome.reason, outcome.detail)
            advance(1)
    # 4. projects left without memories, then the index
    if only is None:
        for key, prev in previous.items():
            if key in keys or prev.get("status") == "empty":
                continue
            try:
                removed = [
                    f"{prev['folder']}/{name}" for name in GENERATED
                    if root.remove(f"{prev['folder']}/{name}")
                ]  # fmt: skip
            except (OSError, UnsafePathError) as exc:
                reason, detail = write_failure(exc, rules=rules)
                summary.projects[key] = "failed"
                _fail(summary, key, reason, detail)
                continue
            outcome = ProjectOutcome(key, prev["folder"], "empty", removed=removed)
            _record(con, outcome, backend_name, model, prev)
            summary.projects[key] = "empty"
            summary.removed += len(removed)
    sessions = fetch_pl(con, sql("project_sessions"))
    memories = selected.group_by("project_key").agg(memories=pl.len())
    index = sessions.join(memories, on="project_key", how="inner").with_columns(
        folder=pl.col("project_key").map_batches(_folders, return_dtype=pl.String)
    )
    try:
        root.write("INDEX.md", render_index(index))
    except (OSError, UnsafePathError) as exc:
        _fail(summary, "INDEX.md", *write_failure(exc, rules=rules))
    if summary.requests:
        record_usage(
            con,
            run_id=summary.run_id,
            kind="actual",
            phase="consolidate",
            backend=backend_name,
            model=model,
            requests=summary.requests,
            input_tokens=summary.input_tokens,
            output_tokens=summary.output_tokens,
            cost_usd=summary.cost_usd if summary.price_known else None,
        )
    if backend is not None:
        await backend.aclose()


def _up_to_date(
    root: OutputRoot, key: str, selected: pl.DataFrame, prev: dict[str, object], model: str
) -> bool:
    """The heuristic backend's check of ``consolidate_project``, made before rendering."""
    if prev.get("status") != "succeeded":
        return False
    digest = input_hash(selected, backend="heuristic", model=model)
    previous = prev.get("input_hash")
    return up_to_date(root, key, digest, previous if isinstance(previous, str) else None)


@task(
    name="render-project",
    task_run_name="render {project_key}",
    cache_policy=NO_CACHE,
    persist_result=False,
    log_prints=False,
)
def render_task(project_key: str, selected_ipc: bytes) -> dict[str, str]:
    """A project's memory files under the heuristic backend (pure work; written by the
    flow's process)."""
    return heuristic_files(project_key, frame_from_ipc(selected_ipc))


class _Ahead:
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


def rendered_by_tasks(
    projects: list[tuple[str, pl.DataFrame]],
) -> Iterator[tuple[str, dict[str, str]]]:
    """Each project's files from a ``render-project`` task on the flow's task runner, in
    order, as many in flight as the runner has workers."""
    runner = current_runner()
    ahead = parallelism(runner) if projects else 1

    def submit(item: tuple[str, pl.DataFrame]) -> PrefectFuture[Any]:
        key, frame = item
        return render_task.submit(key, frame_to_ipc(frame))

    with stopped_with(runner if projects else None):
        results = ordered_results(submit, projects, ahead=ahead)
        for (key, _), files in zip(projects, results, strict=True):
            yield key, files


def _refuse(tokens_in: int) -> bool:
    """Once the budget is reached, no project calls the model any more in this run."""
    return False


def _fail(summary: ConsolidateSummary, key: str, reason: str | None, detail: str | None) -> None:
    """Count a project (or the index) that could not be written, with one line saying why."""
    summary.projects_failed += 1
    line = f"{reason or 'failed'}: {detail}" if detail else (reason or "failed")
    summary.failures[one_line(key, KEY_SHOWN_CHARS)] = line


def _folders(keys: pl.Series) -> pl.Series:
    return pl.Series([project_dirname(k) for k in keys.to_list()], dtype=pl.String)


def _record(
    con: duckdb.DuckDBPyConnection,
    outcome: ProjectOutcome,
    backend: str,
    model: str,
    prev: dict[str, object],
) -> None:
    """Store a project's consolidation outcome (a skipped project keeps its record, and so
    does one deferred by the budget: the next run sees its inputs changed)."""
    if outcome.status in ("skipped", "deferred"):
        return
    succeeded = outcome.status in ("succeeded", "empty")
    con.execute(
        """
        insert or replace into consolidation_jobs (project_key, folder, status, owner,
            input_hash, selected_ids, backend, model, memories, files_written, files_removed,
            last_success_at, last_reason, last_error, updated_at)
        values ($key, $folder, $status, null, $hash, $ids, $backend, $model, $memories,
            $written, $removed, $success_at, $reason, $error, $at)
        """,
        {
            "key": outcome.project_key,
            "folder": outcome.folder,
            "status": outcome.status,
            "hash": outcome.input_hash if succeeded else prev.get("input_hash"),
            "ids": outcome.selected_ids if succeeded else prev.get("selected_ids"),
            "backend": backend,
            "model": model,
            "memories": len(outcome.selected_ids),
            "written": len(outcome.written),
            "removed": len(outcome.removed),
            "success_at": now() if succeeded else None,
            "reason": outcome.reason,
            "error": outcome.detail,
            "at": now(),
        },
    )


@task(
    name="consolidate-projects",
    task_run_name="consolidate into {options.out}",
    cache_policy=NO_CACHE,
)
def consolidate_task(
    options: Options,
    project: str | None = None,
    parent_run_id: str | None = None,
    spent_before: float = 0.0,
) -> ConsolidateSummary:
    """Write the memory files of every project whose memories changed."""
    with phase_of(parent_run_id):
        settings = Settings.from_options(options)
        reporter = Reporter(enabled=options.progress)
        return consolidate_store(
            settings,
            project=project,
            reporter=reporter,
            spent_before=spent_before,
            render=rendered_by_tasks,
        )


@flow(name="memkiln-consolidate")
def consolidate_flow(options: Options, project: str | None = None) -> ConsolidateSummary:
    """Phase 2: per-project memory files."""
    with hold_store(options.db), stoppable():
        summary = consolidate_task(options, project)
    publish("memkiln consolidate", [consolidate_section(summary)], notes(consolidate=summary))
    return summary
