"""The ``memkiln`` command line.

Errors a user can cause become one line on stderr and exit code 2; Prefect is only started
by the commands that run a flow.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from memkiln.errors import ConfigError, MemkilnError
from memkiln.settings import DEFAULT_DB, DEFAULT_OUT, Settings, check_backend, load_settings

app = typer.Typer(
    name="memkiln",
    help="Turn archives of coding-agent sessions into per-project memory files, "
    "keeping every stage in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ArchiveOpt = Annotated[
    Path,
    typer.Option(
        "--archive",
        "-a",
        help="Directory holding rollout files (*.jsonl, *.jsonl.gz, *.jsonl.zst), searched "
        "recursively: Codex sessions, Claude Code transcripts and Pi sessions.",
        show_default=False,
    ),
]
DbOpt = Annotated[
    Path,
    typer.Option(
        "--db",
        help="DuckDB file holding every stage's output; ingest and run create it if missing.",
        envvar="MEMKILN_DB",
    ),
]


def _prefect_defaults() -> None:
    """Defaults that make Prefect's ephemeral mode quiet, offline and self-contained.

    Set before anything imports Prefect, which reads its settings at import time.
    """
    home = Path(os.environ.get("MEMKILN_HOME", Path.home() / ".memkiln"))
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")


def _prefect_environment() -> None:
    """Make sure Prefect's home exists (Prefect creates it without parents, and fails)."""
    try:
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemkilnError(
            f"cannot create Prefect's home {os.environ['PREFECT_HOME']}: {exc.strerror}; "
            "set PREFECT_HOME or MEMKILN_HOME to a writable directory"
        ) from exc


@app.command()
def ingest(
    archive: ArchiveOpt,
    db: DbOpt = DEFAULT_DB,
    batch_mb: Annotated[
        int, typer.Option(help="Megabytes of raw input loaded and normalized per batch.", min=1)
    ] = 32,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on a terminal.")
    ] = True,
    orchestrate: Annotated[
        bool,
        typer.Option(
            "--prefect/--no-prefect",
            help="Run as a Prefect flow (ephemeral API unless PREFECT_API_URL is set), or in "
            "this process alone.",
        ),
    ] = True,
) -> None:
    """Read new and changed rollout files into DuckDB: files, rollouts, items, quarantine.

    Files whose path, size and mtime are unchanged since the last ingest are not read again.
    Lines that cannot be read are quarantined with a reason; the run goes on.
    """
    from memkiln.flows.ingest import check_archive

    check_archive(archive)
    settings = load_settings(archive=archive, db=db, batch_bytes=batch_mb * 1024 * 1024)
    _check_db(settings.db, create=True)
    if orchestrate:
        _prefect_environment()
        from memkiln.flows.ingest import ingest_flow

        summary = ingest_flow(settings, show_progress=progress)
    else:
        from memkiln.flows.ingest import ingest_archive
        from memkiln.flows.progress import Reporter

        summary = ingest_archive(settings, reporter=Reporter(enabled=progress))
    _print_ingest_summary(summary, settings)


def _check_db(db: Path, *, create: bool = False) -> None:
    """Fail fast, before any flow starts, when the database cannot be opened for writing;
    only the commands that fill it (``create``) may create it."""
    from memkiln.io.store import open_store

    if not create and not db.exists():
        raise ConfigError(f"no database at {db}; run 'memkiln ingest' first (or check --db)")
    open_store(db).close()


def _print_ingest_summary(summary, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    console = Console()
    table = Table(title="memkiln ingest", caption=f"run {summary.run_id[:12]}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    rows = [
        ("files seen", summary.files_seen),
        ("  new", summary.files_new),
        ("  changed", summary.files_changed),
        ("  skipped (unchanged)", summary.files_skipped),
        ("  failed (unreadable, corrupt, binary, not a session)", summary.files_failed),
        ("MB read", f"{summary.bytes_read / 1e6:,.1f}"),
        ("rollouts written", summary.rollouts),
        ("items written", summary.items),
        ("quarantined (lines and whole files)", summary.quarantined),
        ("secrets redacted", sum(summary.hits.values())),
    ]
    for name, value in rows:
        table.add_row(name, f"{value:,}" if isinstance(value, int) else str(value))
    console.print(table)
    if summary.statuses:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))
        console.print(f"file outcomes: {statuses}")
    if summary.quarantined:
        console.print(
            f"quarantined lines are in the 'quarantine' table of {settings.db} "
            "(view v_quarantine_by_reason)"
        )


BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="heuristic: offline rule-based extraction (default). openai: any "
        "OpenAI-compatible endpoint (key from OPENAI_API_KEY).",
    ),
]
ModelOpt = Annotated[str, typer.Option("--model", help="Model name for the openai backend.")]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
]
ApiOpt = Annotated[
    str, typer.Option("--api", help="chat (Chat Completions) or responses (Responses API).")
]
ConcurrencyOpt = Annotated[
    int, typer.Option("--concurrency", min=1, max=256, help="Model requests in flight at most.")
]
WindowOpt = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        min=1000,
        help="The model's context window in tokens (the input gets 95% x 70%, less when the "
        "prompt and the output reserve need more of it; default budget 150,000 tokens).",
    ),
]
BackfillOpt = Annotated[
    bool,
    typer.Option(
        "--backfill/--nightly",
        help="Backfill: take sessions of any age. Nightly (default): only sessions updated in "
        "the last --max-age-days.",
    ),
]
MaxAgeOpt = Annotated[
    float, typer.Option("--max-age-days", min=0.01, help="Nightly age limit, in days.")
]
IdleOpt = Annotated[
    float,
    typer.Option("--min-idle-hours", min=0, help="Skip sessions updated more recently than this."),
]
LimitOpt = Annotated[
    int, typer.Option("--max-rollouts", min=1, help="Extractions per run at most.")
]
SourcesOpt = Annotated[
    str,
    typer.Option(
        "--sources", help="Comma-separated session sources to extract (add exec for scripted runs)."
    ),
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", min=0.1, help="Seconds before a model request times out.")
]
RetriesOpt = Annotated[
    int,
    typer.Option(
        "--max-retries",
        min=0,
        help="Retries of a request after 429, 5xx, timeout or lost connection.",
    ),
]


def _extract_settings(options: dict[str, object]) -> dict[str, object]:
    """Map the extraction options a command received onto Settings fields."""
    sources = [x.strip() for x in str(options["sources"]).split(",") if x.strip()]
    return {
        "backend": options["backend"],
        "model": options["model"],
        "base_url": options["base_url"],
        "api": options["api"],
        "concurrency": options["concurrency"],
        "context_window": options["context_window"],
        "backfill": options["backfill"],
        "max_rollout_age_days": options["max_age_days"],
        "min_rollout_idle_hours": options["min_idle_hours"],
        "max_rollouts_per_run": options["max_rollouts"],
        "sources": sources,
        "request_timeout_s": options["timeout"],
        "max_retries": options["max_retries"],
    }


def _print_extract_summary(summary) -> None:  # type: ignore[no-untyped-def]
    console = Console()
    table = Table(title="memkiln extract", caption=f"run {summary.run_id[:12]}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    table.add_row("sessions considered", f"{summary.considered:,}")
    for decision, n in sorted(summary.decisions.items(), key=lambda kv: -kv[1]):
        table.add_row(f"  {decision}", f"{n:,}")
    if summary.orphans_taken_over:
        table.add_row("jobs taken over from a dead run", f"{summary.orphans_taken_over:,}")
    table.add_row("model requests", f"{summary.requests:,}")
    for outcome, n in sorted(summary.outcomes.items()):
        table.add_row(f"  {outcome}", f"{n:,}")
    table.add_row("tokens in / out", f"{summary.input_tokens:,} / {summary.output_tokens:,}")
    table.add_row("cost (USD)", f"{summary.cost_usd:.4f}")
    console.print(table)
    if summary.stopped:
        console.print(f"[bold red]stopped early[/]: {summary.stopped}", highlight=False)


@app.command()
def extract(
    db: DbOpt = DEFAULT_DB,
    backend: BackendOpt = "heuristic",
    model: ModelOpt = "gpt-5-mini",
    base_url: BaseUrlOpt = None,
    api: ApiOpt = "chat",
    concurrency: ConcurrencyOpt = 8,
    context_window: WindowOpt = None,
    backfill: BackfillOpt = False,
    max_age_days: MaxAgeOpt = 10,
    min_idle_hours: IdleOpt = 6,
    max_rollouts: LimitOpt = 1000,
    sources: SourcesOpt = "cli,vscode",
    timeout: TimeoutOpt = 120,
    max_retries: RetriesOpt = 4,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on a terminal.")
    ] = True,
    orchestrate: Annotated[
        bool, typer.Option("--prefect/--no-prefect", help="Run as a Prefect flow, or in-process.")
    ] = True,
) -> None:
    """Phase 1: extract a memory from every eligible session whose output is not up to date.

    Each session is extracted once per version; an interrupted run is resumed by the next.
    Outcomes (succeeded, succeeded_no_output, failed with a reason) are in stage1_attempts.
    """
    settings = load_settings(db=db, **_extract_settings(locals()))
    check_backend(settings)
    _check_db(settings.db)
    if orchestrate:
        _prefect_environment()
        from memkiln.flows.extract import extract_flow

        summary = extract_flow(settings, show_progress=progress)
    else:
        from memkiln.flows.extract import extract_store
        from memkiln.flows.progress import Reporter

        summary = extract_store(settings, reporter=Reporter(enabled=progress))
    _print_extract_summary(summary)


@app.command()
def run(
    archive: ArchiveOpt,
    db: DbOpt = DEFAULT_DB,
    out: OutOpt = DEFAULT_OUT,
    backend: BackendOpt = "heuristic",
    model: ModelOpt = "gpt-5-mini",
    base_url: BaseUrlOpt = None,
    api: ApiOpt = "chat",
    concurrency: ConcurrencyOpt = 8,
    context_window: WindowOpt = None,
    backfill: BackfillOpt = False,
    max_age_days: MaxAgeOpt = 10,
    min_idle_hours: IdleOpt = 6,
    max_rollouts: LimitOpt = 1000,
    sources: SourcesOpt = "cli,vscode",
    timeout: TimeoutOpt = 120,
    max_retries: RetriesOpt = 4,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on a terminal.")
    ] = True,
) -> None:
    """The whole job as one Prefect flow: ingest, extract, consolidate into memory files."""
    from memkiln.flows.ingest import check_archive

    check_archive(archive)
    settings = load_settings(db=db, archive=archive, out=out, **_extract_settings(locals()))
    check_backend(settings)
    _check_db(settings.db, create=True)
    _check_out(settings.out)
    _prefect_environment()
    from memkiln.flows.run import run_flow

    summary = run_flow(settings, show_progress=progress)
    _print_ingest_summary(summary.ingest, settings)
    _print_extract_summary(summary.extract)
    _print_consolidate_summary(summary.consolidate, settings.out)


OutOpt = Annotated[
    Path,
    typer.Option(
        "--out", help="Directory the memory files are written to (one folder per project)."
    ),
]


def _print_consolidate_summary(summary, out: Path) -> None:  # type: ignore[no-untyped-def]
    console = Console()
    table = Table(
        title="memkiln consolidate", caption=f"run {summary.run_id[:12]}", show_header=False
    )
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    statuses: dict[str, int] = {}
    for status in summary.projects.values():
        statuses[status] = statuses.get(status, 0) + 1
    table.add_row("projects", f"{len(summary.projects):,}")
    for status, n in sorted(statuses.items()):
        table.add_row(f"  {status}", f"{n:,}")
    table.add_row("files written", f"{summary.written:,}")
    table.add_row("files removed", f"{summary.removed:,}")
    console.print(table)
    for project, reason in sorted(summary.failures.items()):
        console.print(f"[red]failed[/]: {project}: {reason}", highlight=False)
    console.print(f"memory files: {out}/INDEX.md", highlight=False)


@app.command()
def consolidate(
    db: DbOpt = DEFAULT_DB,
    out: OutOpt = DEFAULT_OUT,
    project: Annotated[
        str | None,
        typer.Option("--project", help="Only this project (its key or its folder name)."),
    ] = None,
    backend: BackendOpt = "heuristic",
    model: ModelOpt = "gpt-5-mini",
    base_url: BaseUrlOpt = None,
    context_window: WindowOpt = None,
    timeout: TimeoutOpt = 120,
    max_retries: RetriesOpt = 4,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on a terminal.")
    ] = True,
    orchestrate: Annotated[
        bool, typer.Option("--prefect/--no-prefect", help="Run as a Prefect flow, or in-process.")
    ] = True,
) -> None:
    """Phase 2: write each project's memory files from its stage-one memories.

    A project whose memories did not change since its last consolidation is not touched.
    """
    settings = load_settings(
        db=db, out=out, backend=backend, model=model, base_url=base_url,
        context_window=context_window, request_timeout_s=timeout, max_retries=max_retries,
    )  # fmt: skip
    check_backend(settings)
    _check_db(settings.db)
    _check_out(settings.out)
    if orchestrate:
        _prefect_environment()
        from memkiln.flows.consolidate import consolidate_flow

        summary = consolidate_flow(settings, project=project, show_progress=progress)
    else:
        from memkiln.flows.consolidate import consolidate_store
        from memkiln.flows.progress import Reporter

        summary = consolidate_store(settings, project=project, reporter=Reporter(enabled=progress))
    if project is not None and not summary.projects:
        raise ConfigError(
            f"no project with memories matches {project!r}; "
            f"see {settings.out}/INDEX.md or 'memkiln status' for the projects"
        )
    _print_consolidate_summary(summary, settings.out)


def _check_out(out: Path) -> None:
    from memkiln.io.memory_files import OutputRoot

    OutputRoot(out)


@app.command()
def show(
    project: Annotated[
        str,
        typer.Argument(
            help="A project key (e.g. github.com/acme/shop or a directory) or its folder name."
        ),
    ],
    out: OutOpt = DEFAULT_OUT,
) -> None:
    """Print a project's memory_summary.md: what an agent loads at the start of a session."""
    from memkiln.transforms.names import project_dirname

    for folder in (project, project_dirname(project)):
        if "/" in folder or folder in ("", ".", ".."):
            continue
        path = out / folder / "memory_summary.md"
        if path.is_file():
            sys.stdout.write(path.read_text(encoding="utf-8"))
            return
    raise MemkilnError(
        f"no memory for {project!r} under {out}; see {out}/INDEX.md for the projects"
    )


@app.command("render-input")
def render_input(
    file: Annotated[
        Path,
        typer.Argument(
            help="One rollout file (.jsonl, .jsonl.gz or .jsonl.zst) of any supported format.",
            show_default=False,
        ),
    ],
    context_window: Annotated[
        int | None,
        typer.Option(
            "--context-window",
            help="The model's context window in tokens; the rollout contents get 95% x 70% "
            "of it, less when the prompt and the output reserve need more. Without it the "
            "budget is 150,000 tokens.",
            min=1000,
        ),
    ] = None,
    show_system: Annotated[
        bool,
        typer.Option("--system", help="Print the system prompt before the user message."),
    ] = False,
) -> None:
    """Print the exact stage-one user message a model would get for one rollout file.

    The message goes to stdout; the token count and the truncation decision go to stderr.
    Nothing is stored and no model is called: this is the audit of what a model would see.
    """
    from memkiln.io.preview import stage_one_input_for_file
    from memkiln.transforms.redact import load_rules

    result, facts = stage_one_input_for_file(
        file,
        context_window=context_window,
        max_output_tokens=load_settings().max_output_tokens,
        rules=load_rules(),
    )
    if show_system:
        sys.stdout.write(result.system)
        sys.stdout.write("\n")
    sys.stdout.write(result.user)
    sys.stdout.flush()
    t = result.truncation
    err = Console(stderr=True)
    err.print(
        f"{facts['format']} rollout {facts['rollout_id']}: contents {t.tokens_before:,} tokens, "
        f"budget {t.budget:,}; "
        + (
            f"truncated in the middle, {t.removed:,} tokens removed, {t.tokens_after:,} kept"
            if t.truncated
            else "not truncated"
        )
        + f"; user message {result.user_tokens:,} tokens (o200k_base)",
        highlight=False,
        soft_wrap=True,
    )
    if facts["quarantined_lines"]:
        err.print(f"{facts['quarantined_lines']} unreadable line(s) were skipped", highlight=False)


@app.command()
def status(db: DbOpt = DEFAULT_DB) -> None:
    """Show what the DuckDB store holds: table sizes, projects and the last runs."""
    from memkiln.io.store import fetch_pl, open_store, table_counts

    if not Path(db).exists():
        raise MemkilnError(f"no database at {db}; run 'memkiln ingest' first")
    con = open_store(db, read_only=True)
    try:
        console = Console()
        counts = table_counts(con)
        console.print(", ".join(f"{k}: {v:,}" for k, v in counts.items()))
        runs = fetch_pl(
            con,
            "select run_id, command, status, started_at, files_seen, rollouts, items, "
            "quarantined from v_runs limit 5",
        )
        console.print(runs)
    finally:
        con.close()


def main() -> None:
    """Console-script entry point: run the app, turning memkiln errors into one line."""
    _prefect_defaults()
    try:
        app()
    except MemkilnError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
