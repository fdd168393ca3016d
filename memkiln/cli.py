"""The ``memkiln`` command line.

Every option maps onto one setting of ``memkiln.settings`` and has no default of its own:
only the options given on the command line are passed, so the environment, the config file
and the defaults apply to the rest. Exit codes: 0 all done; 1 some sessions or projects
failed; 2 a usage or configuration error (one line on stderr); 3 the database is held by
another run; 128 + N when stopped by signal N (the run record is closed as ``interrupted``).
Prefect is only started by the commands that run a flow, after the store is held.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memkiln.errors import ConfigError, Interrupted, MemkilnError, StoreLockedError
from memkiln.settings import (
    AS_GIVEN,
    Options,
    Settings,
    Source,
    check_backend,
    check_runner,
    env_name,
    load_settings,
)
from memkiln.transforms.report import EXIT_FAILURES, EXIT_LOCKED, EXIT_OK, EXIT_USAGE, Section

if TYPE_CHECKING:
    from memkiln.flows.plain_backfill import BackfillSummary
    from memkiln.flows.plain_run import RunSummary
    from memkiln.transforms.summaries import ConsolidateSummary, ExtractSummary, IngestSummary

try:  # typer >= 0.23 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors  # type: ignore[no-redef]  # same module

T = TypeVar("T")
Flow = TypeVar("Flow", bound=Callable[..., Any])

app = typer.Typer(
    name="memkiln",
    help="Turn archives of coding-agent sessions into per-project memory files, "
    "keeping every stage in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

MIB = 1024 * 1024

#: Command-line parameter -> (setting, option). Every option of every command that sets a
#: setting is here, named as the setting (and as its ``MEMKILN_*`` variable).
CLI_OPTIONS: dict[str, tuple[str, str]] = {
    "db": ("db", "--db"),
    "archive": ("archive", "--archive"),
    "out": ("out", "--out"),
    "batch_bytes": ("batch_bytes", "--batch-bytes"),
    "progress": ("progress", "--progress/--no-progress"),
    "prefect": ("prefect", "--prefect/--no-prefect"),
    "task_runner": ("task_runner", "--task-runner"),
    "dask_address": ("dask_address", "--dask-address"),
    "backend": ("backend", "--backend"),
    "model": ("model", "--model"),
    "base_url": ("base_url", "--base-url"),
    "api": ("api", "--api"),
    "concurrency": ("concurrency", "--concurrency"),
    "context_window": ("context_window", "--context-window"),
    "backfill": ("backfill", "--backfill/--nightly"),
    "max_age_days": ("max_rollout_age_days", "--max-rollout-age-days"),
    "min_idle_hours": ("min_rollout_idle_hours", "--min-rollout-idle-hours"),
    "max_rollouts": ("max_rollouts_per_run", "--max-rollouts-per-run"),
    "sources": ("sources", "--sources"),
    "timeout": ("request_timeout_s", "--request-timeout-s"),
    "max_retries": ("max_retries", "--max-retries"),
    "since": ("since", "--since"),
    "until": ("until", "--until"),
    "dry_run": ("dry_run", "--dry-run/--no-dry-run"),
    "budget_usd": ("budget_usd", "--budget-usd"),
    "publish": ("publish", "--publish"),
    "codex_alongside": ("codex_alongside", "--codex-alongside/--no-codex-alongside"),
    "wait": ("wait", "--wait/--no-wait"),
    "poll_interval": ("poll_interval_s", "--poll-interval-s"),
}
#: Options still accepted under a former name and unit, not shown in help.
OLD_OPTIONS: dict[str, tuple[str, str]] = {"batch_mb": ("batch_bytes", "--batch-mb")}
CONVERT: dict[str, Callable[[Any], Any]] = {"batch_mb": lambda mb: mb * MIB}


#: Units of ``parse_size``: the binary ones, and the decimal ones.
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "m": MIB, "mib": MIB, "g": 1024 * MIB, "gib": 1024 * MIB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes of a size given as ``33554432``, ``32MiB``, ``32M`` (binary), ``50MB`` (decimal)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _SIZE_UNITS:
        raise typer.BadParameter(f"{text!r} is not a size: give bytes, or 64MiB, 512KiB, 1GiB")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def _option(param: str, *names: str, text: str = "") -> Any:
    """A ``typer.Option`` for a setting: its help is the setting's description, with the
    environment variable and the default; the option itself defaults to nothing."""
    setting, flag = CLI_OPTIONS[param]
    info = Options.model_fields[setting]
    default = info.get_default(call_default_factory=True)
    shown = ",".join(default) if isinstance(default, list) else default
    if param == "batch_bytes":
        return typer.Option(
            *names,
            parser=parse_size,
            metavar="<size>",
            help=f"{info.description} A number of bytes, or with a unit: 64MiB, 512KiB, 1GiB "
            f"(or kB, MB, GB: powers of 1000) [{env_name(setting)}; default: {default // MIB}MiB]",
            show_default=False,
        )
    shown = "none" if shown is None else shown
    text = f"{text or info.description} [{env_name(setting)}; default: {shown}]"
    return typer.Option(*(names or flag.split("/")), help=text, show_default=False)


DbOpt = Annotated[Path | None, _option("db", "--db")]
ArchiveOpt = Annotated[
    Path | None,
    _option("archive", "--archive", "-a"),
]
OutOpt = Annotated[Path | None, _option("out", "--out")]
BatchOpt = Annotated[int | None, _option("batch_bytes", "--batch-bytes")]
#: The former name of --batch-bytes, in MiB: still accepted, no longer shown.
BatchMbOpt = Annotated[
    int | None,
    typer.Option("--batch-mb", hidden=True, help="--batch-bytes in MiB (the former option)."),
]
ProgressOpt = Annotated[bool | None, _option("progress", "--progress/--no-progress")]
PrefectOpt = Annotated[bool | None, _option("prefect", "--prefect/--no-prefect")]
RunnerOpt = Annotated[str | None, _option("task_runner", "--task-runner")]
DaskOpt = Annotated[str | None, _option("dask_address", "--dask-address")]
BackendOpt = Annotated[str | None, _option("backend", "--backend")]
ModelOpt = Annotated[str | None, _option("model", "--model")]
BaseUrlOpt = Annotated[str | None, _option("base_url", "--base-url")]
ApiOpt = Annotated[str | None, _option("api", "--api")]
ConcurrencyOpt = Annotated[int | None, _option("concurrency", "--concurrency")]
WindowOpt = Annotated[int | None, _option("context_window", "--context-window")]
BackfillOpt = Annotated[
    bool | None,
    _option(
        "backfill",
        "--backfill/--nightly",
        text="--backfill takes sessions of any age (a backfill over history); --nightly skips "
        "those older than max_rollout_age_days.",
    ),
]
# each option is named as its setting (and its MEMKILN_* variable); the shorter names they had
# before are still accepted
MaxAgeOpt = Annotated[
    float | None, _option("max_age_days", "--max-rollout-age-days", "--max-age-days")
]
IdleOpt = Annotated[
    float | None, _option("min_idle_hours", "--min-rollout-idle-hours", "--min-idle-hours")
]
LimitOpt = Annotated[
    int | None, _option("max_rollouts", "--max-rollouts-per-run", "--max-rollouts")
]
SourcesOpt = Annotated[str | None, _option("sources", "--sources")]
TimeoutOpt = Annotated[float | None, _option("timeout", "--request-timeout-s", "--timeout")]
RetriesOpt = Annotated[int | None, _option("max_retries", "--max-retries")]
SinceOpt = Annotated[str | None, _option("since", "--since")]
UntilOpt = Annotated[str | None, _option("until", "--until")]
DryRunOpt = Annotated[bool | None, _option("dry_run", "--dry-run/--no-dry-run")]
BudgetOpt = Annotated[float | None, _option("budget_usd", "--budget-usd")]
PublishOpt = Annotated[str | None, _option("publish", "--publish")]
AlongsideOpt = Annotated[
    bool | None, _option("codex_alongside", "--codex-alongside/--no-codex-alongside")
]
WaitOpt = Annotated[bool | None, _option("wait", "--wait/--no-wait")]
PollOpt = Annotated[float | None, _option("poll_interval", "--poll-interval-s", "--poll-interval")]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON object (with --dry-run: the estimate) instead of tables."
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML file of settings (keys as in 'memkiln config'; relative paths are taken "
        "from the file's folder) [MEMKILN_CONFIG].",
        show_default=False,
    ),
]


def _settings(params: dict[str, Any], config: Path | None = None) -> Settings:
    """Settings from the options given to a command (``None``: not given) and the other
    sources."""
    settings, _ = _settings_and_sources(params, config)
    return settings


def _settings_and_sources(
    params: dict[str, Any], config: Path | None
) -> tuple[Settings, dict[str, Source]]:
    given: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for param, value in params.items():
        known = CLI_OPTIONS.get(param) or OLD_OPTIONS.get(param)
        if known is not None and value is not None:
            setting, flag = known
            given[setting] = CONVERT.get(param, lambda v: v)(value)
            flags[setting] = flag
    return load_settings(given, flags=flags, config=config)


def _on_runner(flow: Flow, settings: Settings) -> Flow:
    """``flow`` on the task runner the settings name (see ``memkiln.io.runner``)."""
    from memkiln.io.runner import with_task_runner

    return with_task_runner(flow, kind=settings.task_runner, address=settings.dask_address)


def _prefect_defaults() -> None:
    """Defaults that make Prefect quiet, offline and self-contained (set before anything
    imports Prefect, which reads its settings at import time). Run logs (INFO) go to the
    API, where the UI shows them; the terminal gets warnings only."""
    home = Path(os.environ.get("MEMKILN_HOME", Path.home() / ".memkiln")).expanduser()
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    if not os.environ.get("PREFECT_API_URL"):
        # the temporary API server shares the terminal: when a scheduler stops the process
        # group it is stopped too, and its services log the cancelled flush of their events
        # as an error with a traceback, after the run's own one line; its failures reach
        # memkiln through the API anyway
        os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    # Prefect creates its home at import, without parents, and warns when it cannot (also
    # under --no-prefect); a home that cannot be made is reported when a flow needs it
    with contextlib.suppress(OSError):
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)


def allocator_defaults() -> None:
    """Polars' allocator setting for a memkiln process (``POLARS_ALLOCATOR_CONF``), before
    anything imports Polars, whose allocator reads it once, when loaded; a value already in the
    environment is kept. Worker processes started later inherit it."""
    from memkiln.constants import POLARS_ALLOCATOR_CONF, POLARS_ALLOCATOR_ENV

    os.environ.setdefault(POLARS_ALLOCATOR_ENV, POLARS_ALLOCATOR_CONF)


def _prefect_environment() -> None:
    """Make sure Prefect's home exists (Prefect creates it without parents, and fails), and
    that a temporary API server this run starts ends with it, even when it is killed."""
    if not os.environ.get("PREFECT_API_URL"):
        from memkiln.io.server_watch import watch_ephemeral_server

        watch_ephemeral_server()
    try:
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemkilnError(
            f"cannot create Prefect's home {os.environ['PREFECT_HOME']}: {exc.strerror}; "
            "set PREFECT_HOME or MEMKILN_HOME to a writable directory"
        ) from exc


#: The line a terminal shows while Prefect starts (the flow's first line replaces it).
PREFECT_STARTING = (
    "starting Prefect (its API server and database take a few seconds; "
    "--no-prefect runs without it)"
)


def _hold(
    settings: Settings,
    *,
    create: bool,
    work: Callable[[bool], T],
    needs_prefect: Callable[[], bool] | None = None,
) -> T:
    """Hold the store (exit 3 at once if another run does), check it can be written, then
    start Prefect (if the settings ask for it and ``needs_prefect``, if given, agrees) and do
    the work, told whether it runs under Prefect."""
    from memkiln.io.lock import hold_store
    from memkiln.io.progress import Reporter

    if not create and not settings.db.exists():
        raise ConfigError(
            f"no database at {settings.db}; run 'memkiln ingest' first (or check --db)"
        )
    reporter = Reporter(enabled=settings.progress)
    try:
        with hold_store(settings.db):
            reporter.waiting(f"opening {settings.db}")
            _check_db(settings.db)
            prefect = settings.prefect and (needs_prefect is None or needs_prefect())
            if prefect:
                reporter.waiting(PREFECT_STARTING)
                if not os.environ.get("PREFECT_API_URL"):
                    from memkiln.io.signals import starting

                    starting("Prefect was starting (its temporary API server)")
                _prefect_environment()
            return work(prefect)
    finally:
        Reporter.done_waiting()


def _check_db(db: Path) -> None:
    """Fail fast, before any flow starts, when the database cannot be opened for writing."""
    from memkiln.io.store import open_store

    open_store(db).close()


def _check_archive(settings: Settings) -> Path:
    from memkiln.flows.plain_ingest import check_archive

    if settings.archive is None:
        raise ConfigError(
            "no archive to ingest: give --archive, MEMKILN_ARCHIVE or archive in the config file"
        )
    return check_archive(settings.archive)


#: Lines of what an ingest set aside shown after its summary (the rest are counted).
SET_ASIDE_SHOWN = 20


def _print_set_aside(summary: IngestSummary) -> None:
    """One line per file and reason of what the ingest quarantined."""
    console = Console(soft_wrap=True)
    for line in summary.set_aside[:SET_ASIDE_SHOWN]:
        console.print(f"set aside: {line}", markup=False, highlight=False)
    if len(summary.set_aside) > SET_ASIDE_SHOWN:
        console.print(
            f"set aside: {len(summary.set_aside) - SET_ASIDE_SHOWN} more "
            "(view v_quarantine_by_reason)",
            markup=False,
            highlight=False,
        )


def _print(sections: Sequence[Section], notes: Sequence[str] = (), caption: str = "") -> None:
    console = _console()
    for title, rows in sections:
        table = Table(title=title, caption=caption, show_header=False)
        table.add_column("what", style="bold")
        table.add_column("count", justify="right")
        for what, value in rows:
            table.add_row(what, value)
        console.print(table)
    for note in notes:
        console.print(_styled("attention", note), soft_wrap=True)
    console.print(f"took {took(_elapsed())}", highlight=False, markup=False)


#: When this command started (``run_cli``), for the time every summary says it took.
_COMMAND_STARTED: list[float] = []


def _elapsed() -> float:
    """Seconds since the command started."""
    import time

    return time.monotonic() - _COMMAND_STARTED[-1] if _COMMAND_STARTED else 0.0


def took(seconds: float) -> str:
    """A duration for a person: ``4.2 s``, ``3 min 05 s``, ``2 h 01 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@app.command()
def ingest(
    archive: ArchiveOpt = None,
    db: DbOpt = None,
    batch_bytes: BatchOpt = None,
    batch_mb: BatchMbOpt = None,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> int:
    """Read new and changed rollout files into DuckDB: files, rollouts, items, quarantine.

    Files whose path, size and mtime are unchanged since the last ingest are not read again.
    Lines that cannot be read are quarantined with a reason; the run goes on.
    """
    from memkiln.transforms.summaries import ingest_section

    settings = _settings(locals(), config)
    _check_archive(settings)
    check_runner(settings)

    def work(prefect: bool) -> IngestSummary:
        if prefect:
            from memkiln.flows.ingest import ingest_flow

            return _on_runner(ingest_flow, settings)(_options(settings))
        from memkiln.flows.plain_ingest import ingest_archive
        from memkiln.io.progress import Reporter

        return ingest_archive(settings, reporter=Reporter(enabled=settings.progress))

    summary = _hold(settings, create=True, work=work)
    _print([ingest_section(summary)], caption=f"run {summary.run_id[:12]}")
    _print_set_aside(summary)
    if summary.quarantined:
        _console().print(
            f"quarantined lines are in the 'quarantine' table of {settings.db} "
            "(view v_quarantine_by_reason)",
            markup=False,
        )
    return EXIT_OK


def _options(settings: Settings) -> Options:
    """The flows' parameter: the settings as a plain model."""
    return Options(**dict(settings))


@app.command()
def extract(
    db: DbOpt = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api: ApiOpt = None,
    concurrency: ConcurrencyOpt = None,
    context_window: WindowOpt = None,
    backfill: BackfillOpt = None,
    max_age_days: MaxAgeOpt = None,
    min_idle_hours: IdleOpt = None,
    max_rollouts: LimitOpt = None,
    sources: SourcesOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    dry_run: DryRunOpt = None,
    budget_usd: BudgetOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> int:
    """Phase 1: extract a memory from every eligible session whose output is not up to date.

    Each session is extracted once per version; an interrupted run is resumed by the next.
    Outcomes (succeeded, succeeded_no_output, failed with a reason) are in stage1_attempts.
    """
    from memkiln.transforms.summaries import extract_section, notes, run_exit_code

    settings = _settings(locals(), config)
    check_backend(settings)

    def work(prefect: bool) -> ExtractSummary:
        if prefect:
            from memkiln.flows.extract import extract_flow

            return _on_runner(extract_flow, settings)(_options(settings))
        from memkiln.flows.plain_extract import extract_store
        from memkiln.io.progress import Reporter

        return extract_store(settings, reporter=Reporter(enabled=settings.progress))

    summary = _hold(settings, create=False, work=work)
    if _print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    if as_json:
        return _print_counters(summary, run_exit_code(extract=summary))
    _print([extract_section(summary)], notes(extract=summary), f"run {summary.run_id[:12]}")
    return run_exit_code(extract=summary)


@app.command()
def run(
    archive: ArchiveOpt = None,
    db: DbOpt = None,
    out: OutOpt = None,
    batch_bytes: BatchOpt = None,
    batch_mb: BatchMbOpt = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api: ApiOpt = None,
    concurrency: ConcurrencyOpt = None,
    context_window: WindowOpt = None,
    backfill: BackfillOpt = None,
    max_age_days: MaxAgeOpt = None,
    min_idle_hours: IdleOpt = None,
    max_rollouts: LimitOpt = None,
    sources: SourcesOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    dry_run: DryRunOpt = None,
    budget_usd: BudgetOpt = None,
    publish: PublishOpt = None,
    codex_alongside: AlongsideOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> int:
    """The whole job as one Prefect flow: ingest, extract, consolidate into memory files
    (then, with --publish, place them where the agents named load memory).

    This is what a scheduler runs each night (system cron, or 'memkiln serve').
    """
    from memkiln.transforms.summaries import (
        consolidate_section,
        extract_section,
        ingest_section,
        notes,
        run_exit_code,
    )

    settings = _settings(locals(), config)
    _check_archive(settings)
    check_backend(settings)
    _check_out(settings.out)

    def work(prefect: bool) -> RunSummary:
        if prefect:
            from memkiln.flows.run import run_flow

            return _on_runner(run_flow, settings)(_options(settings))
        from memkiln.flows.plain_run import run_job

        return run_job(settings)

    skipped: list[bool] = []

    def needs_prefect() -> bool:
        """Prefect's temporary API server costs more than a run with nothing new (see
        ``memkiln.flows.nothing_new``): such a run goes without it."""
        from memkiln.flows.nothing_new import prefect_worth_starting

        worth = prefect_worth_starting(settings)
        skipped.extend([] if worth else [True])
        return worth

    summary = _hold(settings, create=True, work=work, needs_prefect=needs_prefect)
    if _print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    if as_json:
        code = run_exit_code(extract=summary.extract, consolidate=summary.consolidate)
        return _print_counters(summary, code)
    sections = [
        ingest_section(summary.ingest),
        extract_section(summary.extract),
        consolidate_section(summary.consolidate),
    ]
    attention = notes(extract=summary.extract, consolidate=summary.consolidate)
    if summary.publish is not None:
        from memkiln.transforms.publish import publish_section

        sections.append(publish_section(summary.publish))
        attention += summary.publish.lines
    _print(sections, attention, f"run {summary.run_id[:12]}")
    _print_set_aside(summary.ingest)
    _console().print(f"memory files: {settings.out}/INDEX.md", highlight=False, markup=False)
    if skipped:
        from memkiln.flows.nothing_new import WITHOUT_PREFECT

        _console().print(WITHOUT_PREFECT, highlight=False, markup=False)
    return run_exit_code(extract=summary.extract, consolidate=summary.consolidate)


@app.command()
def backfill(
    archive: ArchiveOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    db: DbOpt = None,
    out: OutOpt = None,
    batch_bytes: BatchOpt = None,
    batch_mb: BatchMbOpt = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api: ApiOpt = None,
    concurrency: ConcurrencyOpt = None,
    context_window: WindowOpt = None,
    min_idle_hours: IdleOpt = None,
    max_rollouts: LimitOpt = None,
    sources: SourcesOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    dry_run: DryRunOpt = None,
    budget_usd: BudgetOpt = None,
    wait: WaitOpt = None,
    poll_interval: PollOpt = None,
    as_json: JsonOpt = False,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> int:
    """Backfill years of history: ingest, extract every eligible session whose dates fall in
    --since..--until (no age window) in batches of --max-rollouts, then consolidate.

    Interrupt it anywhere and run it again: it goes on without redoing finished sessions.
    --dry-run calls no model and estimates tokens and cost; --budget-usd caps the spend;
    with --backend openai-batch, --wait submits, polls and applies until every batch ended.
    """
    from memkiln.transforms.summaries import (
        consolidate_section,
        extract_section,
        ingest_section,
        notes,
        run_exit_code,
    )

    settings = _settings(locals(), config)
    _check_archive(settings)
    check_backend(settings)
    _check_out(settings.out)

    def work(prefect: bool) -> BackfillSummary:
        if prefect:
            from memkiln.flows.backfill import backfill_flow

            return _on_runner(backfill_flow, settings)(_options(settings))
        from memkiln.flows.plain_backfill import backfill_job

        return backfill_job(settings)

    summary = _hold(settings, create=True, work=work)
    if _print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    extracted = summary.extract
    if as_json:
        code = run_exit_code(extract=extracted, consolidate=summary.consolidate)
        return _print_counters(summary, code)
    sections = [
        ingest_section(summary.ingest),
        extract_section(extracted),
        consolidate_section(summary.consolidate),
    ]
    caption = f"run {summary.run_id[:12]}, {len(summary.batches)} extraction batch(es)"
    _print(sections, notes(extract=extracted, consolidate=summary.consolidate), caption)
    _console().print(f"memory files: {settings.out}/INDEX.md", highlight=False, markup=False)
    return run_exit_code(extract=extracted, consolidate=summary.consolidate)


def _print_counters(summary: Any, code: int) -> int:
    """A run's counters (as in ``runs``) and why it stopped early, as one JSON object."""
    extract = getattr(summary, "extract", summary)
    out = summary.counters() | {
        "run_id": summary.run_id,
        "stopped": extract.stopped,
        "budget_reached": extract.budget_reached,
        "seconds": round(_elapsed(), 1),
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return code


def _print_estimate(estimate: Any, *, as_json: bool, run_id: str) -> bool:
    """Print a dry run's estimate (a table, or one JSON object); False when not a dry run."""
    if estimate is None:
        return False
    if as_json:
        sys.stdout.write(json.dumps(estimate.as_json() | {"run_id": run_id}) + "\n")
    else:
        from memkiln.transforms.estimate import estimate_section

        _print([estimate_section(estimate)], caption=f"run {run_id[:12]}")
    return True


@app.command()
def consolidate(
    db: DbOpt = None,
    out: OutOpt = None,
    project: Annotated[
        str | None,
        typer.Option("--project", help="Only this project (its key or its folder name)."),
    ] = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    context_window: WindowOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> int:
    """Phase 2: write each project's memory files from its stage-one memories.

    A project whose memories did not change since its last consolidation is not touched.
    """
    from memkiln.transforms.summaries import consolidate_section, notes, run_exit_code

    settings = _settings(locals(), config)
    check_backend(settings)
    _check_out(settings.out)

    def work(prefect: bool) -> ConsolidateSummary:
        if prefect:
            from memkiln.flows.consolidate import consolidate_flow

            return _on_runner(consolidate_flow, settings)(_options(settings), project)
        from memkiln.flows.plain_consolidate import consolidate_store
        from memkiln.io.progress import Reporter

        reporter = Reporter(enabled=settings.progress)
        return consolidate_store(settings, project=project, reporter=reporter)

    summary = _hold(settings, create=False, work=work)
    if project is not None and not summary.projects:
        raise ConfigError(
            f"no project with memories matches {project!r}; "
            f"see {settings.out}/INDEX.md or 'memkiln status' for the projects"
        )
    _print([consolidate_section(summary)], notes(consolidate=summary), f"run {summary.run_id[:12]}")
    _console().print(f"memory files: {settings.out}/INDEX.md", highlight=False, markup=False)
    return run_exit_code(consolidate=summary)


def _check_out(out: Path) -> None:
    from memkiln.io.memory_files import OutputRoot

    OutputRoot(out)


@app.command("publish")
def publish_command(
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="The agents, comma-separated: claude (Claude Code's auto memory), omp (Oh My "
            "Pi), codex (Codex's global memory) [default: the publish setting, else all three].",
            show_default=False,
        ),
    ] = None,
    dry_run: DryRunOpt = None,
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Take back what memkiln published: its block out of files it changed (their "
            "other bytes as before), the files and folders it created deleted.",
        ),
    ] = False,
    project: Annotated[
        str | None,
        typer.Option("--project", help="Only this project (its key, folder, directory or name)."),
    ] = None,
    codex_alongside: AlongsideOpt = None,
    db: DbOpt = None,
    out: OutOpt = None,
    config: ConfigOpt = None,
) -> int:
    """Place each project's memory where the agents load it at session start: a marked block
    in Claude Code's MEMORY.md and a topic file beside it, Oh My Pi's per-project
    memory_summary.md, and one global summary for Codex.

    Files memkiln did not write are never overwritten; a second publish changes nothing;
    --dry-run lists what would change and writes nothing. An agent that is not installed, or
    whose memory is off, is skipped with one line.
    """
    from memkiln.flows.plain_publish import publish_store
    from memkiln.transforms.publish import TARGETS, publish_section

    settings = _settings(locals(), config)
    targets = None
    if to is not None:
        targets = [t.strip() for t in to.split(",") if t.strip()]
        unknown = [t for t in targets if t not in TARGETS]
        if unknown or not targets:
            raise ConfigError(
                f"unknown agent {unknown[0] if unknown else to!r} in --to; use {', '.join(TARGETS)}"
            )
    summary = _hold(
        settings,
        create=False,
        work=lambda _prefect: publish_store(
            settings, targets=targets, remove=remove, project=project
        ),
        needs_prefect=lambda: False,  # publishing is file work: always in-process
    )
    if summary.dry_run:
        _print_steps(summary)
    caption = "dry run" if summary.dry_run else f"run {summary.run_id[:12]}"
    _print([publish_section(summary)], summary.lines, caption)
    return EXIT_FAILURES if summary.failed() else EXIT_OK


def _print_steps(summary: Any) -> None:
    """A dry run's list: per target, each file it would create, change, remove or leave."""
    table = Table(title="what publish would do", show_header=True)
    for name in ("agent", "action", "bytes", "file"):
        table.add_column(
            name,
            justify="right" if name == "bytes" else "left",
            overflow="fold" if name == "file" else "ellipsis",
        )
    verbs = {"keep": "leave (unchanged)", "skip": "leave alone"}
    for step in summary.steps:
        table.add_row(
            step.target, verbs.get(step.action, step.action), f"{step.size:,}", Text(step.path)
        )
    Console().print(table)


@app.command()
def serve(
    cron: Annotated[
        str,
        typer.Option(
            "--cron",
            help="When the nightly run starts (cron syntax, the server's time zone is UTC).",
        ),
    ] = "0 3 * * *",
    name: Annotated[
        str, typer.Option("--name", help="Name of the deployment in Prefect.")
    ] = "nightly",
    archive: ArchiveOpt = None,
    db: DbOpt = None,
    out: OutOpt = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the nightly flow (ingest, extract, consolidate) on a cron schedule, from this
    one long-lived process, against the Prefect server named by PREFECT_API_URL.

    The settings (config file, MEMKILN_* variables, these options) are read once, here,
    with paths made absolute, and become the deployment's parameters: restart serve after
    changing them. Each scheduled run shows its summary as an artifact in Prefect's UI.
    """
    settings = _settings(locals(), config)
    settings = settings.model_copy(
        update={
            "archive": _check_archive(settings).resolve(),
            "db": settings.db.expanduser().resolve(),
            "out": settings.out.expanduser().resolve(),
            "progress": False,
        }
    )
    check_backend(settings)
    _check_out(settings.out)
    options = _options(settings)
    parameters = {"options": options.model_dump(mode="json", context=AS_GIVEN)}
    _refuse_secrets_in_parameters(options, parameters["options"])
    if not os.environ.get("PREFECT_API_URL"):
        raise ConfigError(
            "serve needs a Prefect server: start one ('prefect server start') and set "
            "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api); or call 'memkiln run' from cron"
        )
    from prefect.client.schemas.schedules import construct_schedule

    try:
        construct_schedule(cron=cron)
    except ValueError as exc:
        raise ConfigError(f"invalid --cron {cron!r}: {str(exc).splitlines()[0]}") from None
    _prefect_environment()
    _check_prefect_server(os.environ["PREFECT_API_URL"])
    from memkiln.flows.run import run_flow
    from memkiln.flows.run_logs import quiet_keepalive_tracebacks
    from memkiln.flows.serving import (
        forkserver_flow_runs,
        one_run_at_a_time,
        report_skipped_runs,
        serve_deployment,
    )

    forkserver_flow_runs()
    report_skipped_runs()
    quiet_keepalive_tracebacks()
    served = _on_runner(run_flow, settings)  # the configured task runner, as 'run' does
    signum = serve_deployment(
        served,
        name=name,
        cron=cron,
        parameters=parameters,
        limit=one_run_at_a_time(),  # a run due while one runs is cancelled
        on_ready=lambda: print(
            f"memkiln serve: deployment {served.name}/{name} runs on cron {cron!r} "
            "(one run at a time); waiting for runs; SIGTERM or Ctrl-C stops",
            flush=True,
        ),
    )
    if signum is not None:
        import signal

        sys.stderr.write(
            f"error: interrupted by {signal.Signals(signum).name}: serve stopped; a flow run "
            "in progress is cancelled (Cancelled in Prefect), the next run closes its records\n"
        )
        raise typer.Exit(128 + signum)


def _check_prefect_server(url: str) -> None:
    """The Prefect server ``serve`` registers with answers its health check (Prefect's own
    client), else one line: a configuration error, not a traceback."""
    from prefect.client.orchestration import get_client

    from memkiln.io.rules import load_rules
    from memkiln.transforms.redact import redact_text

    with get_client(sync_client=True) as client:
        problem = client.api_healthcheck()
    if problem is not None:
        why = (str(problem).splitlines() or [""])[0]
        raise ConfigError(
            f"the Prefect server at PREFECT_API_URL={redact_text(url, rules=load_rules())} "
            f"cannot be reached ({type(problem).__name__}: {why}): "
            "start it ('prefect server start') or correct PREFECT_API_URL"
        )


def _refuse_secrets_in_parameters(options: Options, as_given: dict[str, Any]) -> None:
    """A deployment's parameters are stored in Prefect's database as they are (its flow runs
    need the real paths): refuse to serve when one of them holds what redaction would remove."""
    redacted = options.model_dump(mode="json")
    held = sorted(k for k, v in as_given.items() if redacted.get(k) != v)
    if held:
        raise ConfigError(
            f"serve would store {', '.join(held)} in Prefect's database, and "
            f"{'it holds' if len(held) == 1 else 'they hold'} what looks like a secret: "
            "move it out of the path or URL, or call 'memkiln run' from cron instead"
        )


@app.command("config")
def show_config(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON: {setting: {value, source}}.")
    ] = False,
    archive: ArchiveOpt = None,
    db: DbOpt = None,
    out: OutOpt = None,
    batch_bytes: BatchOpt = None,
    batch_mb: BatchMbOpt = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api: ApiOpt = None,
    concurrency: ConcurrencyOpt = None,
    context_window: WindowOpt = None,
    backfill: BackfillOpt = None,
    max_age_days: MaxAgeOpt = None,
    min_idle_hours: IdleOpt = None,
    max_rollouts: LimitOpt = None,
    sources: SourcesOpt = None,
    timeout: TimeoutOpt = None,
    max_retries: RetriesOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    dry_run: DryRunOpt = None,
    budget_usd: BudgetOpt = None,
    publish: PublishOpt = None,
    codex_alongside: AlongsideOpt = None,
    wait: WaitOpt = None,
    poll_interval: PollOpt = None,
    progress: ProgressOpt = None,
    prefect: PrefectOpt = None,
    task_runner: RunnerOpt = None,
    dask_address: DaskOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print the effective settings, each with where its value came from: command line,
    MEMKILN_* environment variable, config file (--config or MEMKILN_CONFIG), or default.

    Takes every option of the other commands, to show what they would use. Nothing runs.
    """
    from memkiln.settings import config_path, masked

    params = {k: v for k, v in locals().items() if k != "as_json"}
    effective, origins = _settings_and_sources(params, config)
    values = effective.model_dump(mode="json", context=AS_GIVEN)
    if as_json:
        shown = {name: {"value": values[name], "source": str(src)} for name, src in origins.items()}
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return
    table = Table(title="memkiln settings", show_header=True)
    table.add_column("setting", style="bold")
    table.add_column("value")
    table.add_column("from")
    for name, src in origins.items():
        table.add_row(name, masked(name, getattr(effective, name)), str(src))
    key = os.environ.get("OPENAI_API_KEY")
    table.add_row("(api key)", "****" if key else "not set", "environment OPENAI_API_KEY")
    console = _console()
    console.print(table)
    path = config_path(config)
    config_file = path.resolve() if path else "none"
    console.print(f"config file: {config_file}", highlight=False, markup=False)
    api_url = os.environ.get("PREFECT_API_URL") or "none (ephemeral server per run)"
    console.print(
        f"Prefect: home {os.environ['PREFECT_HOME']}, API {api_url}", highlight=False, markup=False
    )


@app.command()
def report(
    report_file: Annotated[
        Path,
        typer.Option("--out", "-o", help="The HTML file to write.", show_default=True),
    ] = Path("report.html"),
    db: DbOpt = None,
    out: Annotated[
        Path | None,
        _option(
            "out", "--memories", text="Directory of the memory files the project table links to."
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Write one self-contained HTML report of the database: the last run, what failed and
    why, what it cost, the projects (linked to their memory folders) and charts. It opens
    offline: the chart library and the data are inside the file. The database is only read."""
    from memkiln.io.html_report import write_report

    settings = _settings({"db": db, "out": out}, config)
    done = write_report(settings.db, report_file, memories=settings.out)
    _console().print(
        f"wrote {done.path} ({done.bytes / 1e6:.1f} MB): {done.charts} charts, "
        f"{done.projects} projects",
        highlight=False,
        markup=False,
    )


@app.command()
def show(
    project: Annotated[
        str,
        typer.Argument(
            help="The project: its git remote in any form (https://github.com/acme/shop, "
            "git@github.com:acme/shop.git, github.com/acme/shop), a directory its sessions ran "
            "in, its memory folder, or a unique part of its name (shop)."
        ),
    ],
    db: DbOpt = None,
    out: OutOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print a project's memory_summary.md: what an agent loads at the start of a session.

    A name that matches several projects, or none, is an error that lists the candidates.
    """
    from memkiln.io.status import memory_summary

    settings = _settings(locals(), config)
    sys.stdout.write(memory_summary(settings.db, settings.out, project))


@app.command("render-input")
def render_input(
    file: Annotated[
        Path,
        typer.Argument(
            help="One rollout file (.jsonl, .jsonl.gz or .jsonl.zst) of any supported format.",
            show_default=False,
        ),
    ],
    context_window: WindowOpt = None,
    show_system: Annotated[
        bool,
        typer.Option("--system", help="Print the system prompt before the user message."),
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Print the exact stage-one user message a model would get for one rollout file.

    The message goes to stdout; the token count and the truncation decision go to stderr.
    Nothing is stored and no model is called: this is the audit of what a model would see.
    """
    from memkiln.io.rules import load_rules
    from memkiln.llm.requests import stage_one_input_for_file

    settings = _settings({"context_window": context_window}, config)
    result, facts = stage_one_input_for_file(
        file,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
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
        markup=False,
        soft_wrap=True,
    )
    if facts["quarantined_lines"]:
        err.print(f"{facts['quarantined_lines']} unreadable line(s) were skipped", highlight=False)


@app.command("redact")
def redact(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Files to redact, in order; none (or -) reads stdin.", show_default=False
        ),
    ] = None,
    stats: Annotated[
        bool, typer.Option("--stats", help="Print the hits per rule to stderr.")
    ] = False,
) -> None:
    """Write FILE... (or stdin) to stdout with every secret replaced by [REDACTED_SECRET].

    The same rules as ingest: scrub a log or a transcript before pasting it anywhere.
    """
    from memkiln.io.redact_stream import redact_streams
    from memkiln.io.rules import load_rules

    missing = [p for p in files or [] if str(p) != "-" and not p.is_file()]
    if missing:
        what = "a folder, not a file" if missing[0].is_dir() else "no such file"
        raise typer.BadParameter(f"{what}: {missing[0]}", param_hint="FILE")
    hits = redact_streams(
        files or [], stdin=sys.stdin.buffer, stdout=sys.stdout.buffer, rules=load_rules()
    )
    if stats:
        err = Console(stderr=True)
        for rule_id, n in hits.most_common():
            err.print(f"{n:8,}  {rule_id}", highlight=False)
        err.print(f"{sum(hits.values()):8,}  secrets redacted", highlight=False)


StatusJsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]


@app.command()
def status(as_json: StatusJsonOpt = False, db: DbOpt = None, config: ConfigOpt = None) -> None:
    """Show the state of the store: job states, projects, the last runs and the top failure
    reasons. Reads the copy published for readers, so it answers while a run writes."""
    from memkiln.io.status import print_json, print_status, status_report

    report = status_report(_settings(locals(), config).db)
    if as_json:
        sys.stdout.write(print_json(report))
    else:
        print_status(report, _console())


@app.command()
def projects(as_json: StatusJsonOpt = False, db: DbOpt = None, config: ConfigOpt = None) -> None:
    """List the projects: sessions, items, last activity and memories, most recent first."""
    from memkiln.io.status import print_json, print_projects, project_list

    rows = project_list(_settings(locals(), config).db)
    if as_json:
        sys.stdout.write(print_json(rows))
    else:
        print_projects(rows, _console())


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"memkiln {package_version('memkiln')}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print memkiln's version and exit.", is_eager=True, callback=_version
        ),
    ] = False,
) -> None:
    """Turn archives of coding-agent sessions into per-project memory files, keeping every
    stage in DuckDB."""


def _styled(label: str, message: str) -> Text:
    """``label: message`` for the terminal, the label in bold red; the message (it can hold
    paths and values from sessions) is shown as it is: never read as Rich markup, on one
    line, without control characters or terminal escapes."""
    from memkiln.transforms.text import one_line

    return Text.assemble((f"{label}:", "bold red"), " ", one_line(message, 10_000))


#: Width of output that goes to no terminal (a pipe, a file, cron's mail): tables as wide as
#: their values, so nothing is cut (a terminal's own width applies on a terminal).
UNCUT_WIDTH = 10_000
#: Width of ``--help`` that goes to no terminal: wide enough that no setting's variable name
#: or default is cut (``[MEMKILN_MIN_ROLLOUT_IDLE_HOURS; …``); help wraps, it is never cut.
HELP_WIDTH = 160


def _console() -> Console:
    """A console on stdout: the terminal's width there, and elsewhere (unless ``COLUMNS``
    says otherwise) as wide as the output, so a value is never cut to fit 80 columns."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=UNCUT_WIDTH)


def _help_width() -> None:
    """``--help`` printed to no terminal is as wide as ``HELP_WIDTH`` (typer's help reads
    ``TERMINAL_WIDTH``, else the terminal's width, else 80)."""
    from typer import rich_utils

    if rich_utils.MAX_WIDTH is None and not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        rich_utils.MAX_WIDTH = HELP_WIDTH


def _fail(message: str, code: int) -> int:
    Console(stderr=True).print(_styled("error", message), soft_wrap=True)
    return code


def run_cli(args: Sequence[str] | None = None) -> int:
    """Run the app and return the exit code; every error becomes one line on stderr."""
    import time

    from memkiln.flows.ephemeral import stop_ephemeral_server
    from memkiln.io.signals import interruptible, stopped_line

    _COMMAND_STARTED.append(time.monotonic())
    _prefect_defaults()
    allocator_defaults()
    _help_width()
    command = typer.main.get_command(app)
    try:
        with interruptible(on_hard_exit=stop_ephemeral_server):
            code = command.main(
                args=list(sys.argv[1:] if args is None else args),
                prog_name="memkiln",
                standalone_mode=False,
            )
    except click_errors.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return EXIT_USAGE
    except click_errors.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        return _fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
    except click_errors.ClickException as exc:
        return _fail(exc.format_message(), EXIT_USAGE)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return _fail("aborted", 130)
    except StoreLockedError as exc:
        return _fail(str(exc), EXIT_LOCKED)
    except MemkilnError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except Interrupted as exc:
        sys.stderr.write(stopped_line(exc) + "\n")
        return 128 + exc.signum
    except RuntimeError as exc:
        if "ephemeral Prefect API server" not in str(exc):
            raise
        limit = os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "?")
        return _fail(
            f"Prefect's temporary API server did not start within {limit} s (a busy machine?); "
            "nothing was done: run again, raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, "
            "point PREFECT_API_URL at a running server, or use --no-prefect",
            EXIT_USAGE,
        )
    return code if isinstance(code, int) else EXIT_OK


def main() -> None:
    """Console-script entry point."""
    sys.exit(run_cli())


if __name__ == "__main__":
    main()
