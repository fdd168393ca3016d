"""The ``memkiln`` command line.

Every option maps onto one setting of ``memkiln.settings`` and has no default of its own:
only the options given on the command line are passed, so the environment, the config file
and the defaults apply to the rest. Exit codes: 0 all done; 1 some sessions or projects
failed; 2 a usage or configuration error (one line on stderr); 3 the database is held by
another run; 128 + N when stopped by signal N (the run record is closed as ``interrupted``).
Prefect is only started by the commands that run a flow, after the store is held.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

import memkiln.cli_options as opt
import memkiln.cli_output as cout
from memkiln.cli_env import allocator_defaults, prefect_defaults
from memkiln.errors import ConfigError, Interrupted, MemkilnError, StoreLockedError
from memkiln.settings import Settings, check_backend, check_runner
from memkiln.transforms.report import EXIT_FAILURES, EXIT_LOCKED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from memkiln.pipeline.runner import Runner

try:  # typer >= 0.23 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors  # type: ignore[no-redef]  # same module

T = TypeVar("T")

app = typer.Typer(
    name="memkiln",
    help="Turn archives of coding-agent sessions into per-project memory files, "
    "keeping every stage in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _hold(
    settings: Settings,
    *,
    create: bool,
    work: Callable[[Runner], T],
    needs_prefect: Callable[[], bool] | None = None,
) -> T:
    """Hold the store (exit 3 at once if another run does), check it can be written, then
    start Prefect (if the settings ask for it and ``needs_prefect``, if given, agrees) and do
    the work on the runner that gives (``memkiln.flows.launch``)."""
    from memkiln.flows.launch import runner_for
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
            return work(runner_for(settings, prefect=prefect, reporter=reporter))
    finally:
        Reporter.done_waiting()


def _check_db(db: Path) -> None:
    """Fail fast, before any flow starts, when the database cannot be opened for writing."""
    from memkiln.io.store import open_store

    open_store(db).close()


def _check_archive(settings: Settings) -> Path:
    from memkiln.pipeline.ingest import check_archive

    if settings.archive is None:
        raise ConfigError(
            "no archive to ingest: give --archive, MEMKILN_ARCHIVE or archive in the config file"
        )
    return check_archive(settings.archive)


@app.command()
@opt.options(*opt.INGEST_OPTIONS)
def ingest(**given: Any) -> int:
    """Read new and changed rollout files into DuckDB: files, rollouts, items, quarantine.

    Files whose path, size and mtime are unchanged since the last ingest are not read again.
    Lines that cannot be read are quarantined with a reason; the run goes on.
    """
    from memkiln.transforms.summaries import ingest_section

    settings = opt.settings_of(given, given["config"])
    _check_archive(settings)
    check_runner(settings)

    from memkiln.pipeline.ingest import ingest_job

    summary = _hold(settings, create=True, work=lambda runner: runner.job(ingest_job, settings))
    cout.print_sections([ingest_section(summary)], caption=f"run {summary.run_id[:12]}")
    cout.print_set_aside(summary)
    if summary.quarantined:
        cout.stdout_console().print(
            f"quarantined lines are in the 'quarantine' table of {settings.db} "
            "(view v_quarantine_by_reason)",
            markup=False,
        )
    return EXIT_OK


@app.command()
@opt.options(*opt.EXTRACT_OPTIONS)
def extract(as_json: opt.JsonOpt = False, **given: Any) -> int:
    """Phase 1: extract a memory from every eligible session whose output is not up to date.

    Each session is extracted once per version; an interrupted run is resumed by the next.
    Outcomes (succeeded, succeeded_no_output, failed with a reason) are in stage1_attempts.
    With --backend openai-batch, --wait submits, polls and applies until every batch ended.
    """
    from memkiln.transforms.summaries import extract_section, notes, run_exit_code

    settings = opt.settings_of(given, given["config"])
    check_backend(settings)

    from memkiln.pipeline.extract import extract_job

    summary = _hold(settings, create=False, work=lambda runner: runner.job(extract_job, settings))
    if cout.print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    if as_json:
        return cout.print_counters(summary, run_exit_code(extract=summary))
    cout.print_sections(
        [extract_section(summary)], notes(extract=summary), f"run {summary.run_id[:12]}"
    )
    return run_exit_code(extract=summary)


@app.command()
@opt.options(*opt.RUN_OPTIONS)
def run(as_json: opt.JsonOpt = False, **given: Any) -> int:
    """The whole job as one Prefect flow: ingest, extract, consolidate into memory files
    (then, with --publish, place them where the agents named load memory).

    This is what a scheduler runs each night (system cron, or 'memkiln serve').
    With --backend openai-batch, --wait submits, polls and applies until every batch ended.
    """
    from memkiln.pipeline.run import run_job, run_report
    from memkiln.transforms.summaries import run_exit_code

    settings = opt.settings_of(given, given["config"])
    _check_archive(settings)
    check_backend(settings)
    _check_out(settings.out)

    skipped: list[bool] = []

    def needs_prefect() -> bool:
        """Prefect's temporary API server costs more than a run with nothing new (see
        ``memkiln.flows.nothing_new``): such a run goes without it."""
        from memkiln.flows import nothing_new

        worth = nothing_new.prefect_worth_starting(settings)
        skipped.extend([] if worth else [True])
        return worth

    summary = _hold(
        settings,
        create=True,
        work=lambda runner: runner.job(run_job, settings),
        needs_prefect=needs_prefect,
    )
    if cout.print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    code = run_exit_code(extract=summary.extract, consolidate=summary.consolidate)
    if as_json:
        return cout.print_counters(summary, code)
    cout.print_sections(*run_report(summary), f"run {summary.run_id[:12]}")
    cout.print_set_aside(summary.ingest)
    cout.print_memory_files(settings.out)
    if skipped:
        from memkiln.flows.nothing_new import WITHOUT_PREFECT

        cout.stdout_console().print(WITHOUT_PREFECT, highlight=False, markup=False)
    return code


@app.command()
@opt.options(*opt.BACKFILL_OPTIONS)
def backfill(as_json: opt.JsonOpt = False, **given: Any) -> int:
    """Backfill years of history: ingest, extract every eligible session whose dates fall in
    --since..--until (no age window) in batches of --max-rollouts, then consolidate.

    Interrupt it anywhere and run it again: it goes on without redoing finished sessions.
    --dry-run calls no model and estimates tokens and cost; --budget-usd caps the spend;
    with --backend openai-batch, --wait submits, polls and applies until every batch ended.
    """
    from memkiln.pipeline.backfill import backfill_job, backfill_report
    from memkiln.transforms.summaries import run_exit_code

    settings = opt.settings_of(given, given["config"])
    _check_archive(settings)
    check_backend(settings)
    _check_out(settings.out)
    summary = _hold(settings, create=True, work=lambda runner: runner.job(backfill_job, settings))
    if cout.print_estimate(summary.estimate, as_json=as_json, run_id=summary.run_id):
        return EXIT_OK
    code = run_exit_code(extract=summary.extract, consolidate=summary.consolidate)
    if as_json:
        return cout.print_counters(summary, code)
    caption = f"run {summary.run_id[:12]}, {len(summary.rounds)} extraction round(s)"
    cout.print_sections(*backfill_report(summary), caption)
    cout.print_memory_files(settings.out)
    return code


@app.command()
@opt.options(*opt.CONSOLIDATE_OPTIONS)
def consolidate(
    project: opt.ProjectOpt = None,
    **given: Any,
) -> int:
    """Phase 2: write each project's memory files from its stage-one memories.

    A project whose memories did not change since its last consolidation is not touched.
    """
    from memkiln.transforms.summaries import consolidate_section, notes, run_exit_code

    settings = opt.settings_of(given, given["config"])
    check_backend(settings)
    _check_out(settings.out)

    from memkiln.pipeline.consolidate import consolidate_job

    summary = _hold(
        settings, create=False, work=lambda runner: runner.job(consolidate_job, settings, project)
    )
    if project is not None and not summary.projects:
        raise ConfigError(
            f"no project with memories matches {project!r}; "
            f"see {settings.out}/INDEX.md or 'memkiln status' for the projects"
        )
    cout.print_sections(
        [consolidate_section(summary)], notes(consolidate=summary), f"run {summary.run_id[:12]}"
    )
    cout.print_memory_files(settings.out)
    return run_exit_code(consolidate=summary)


def _check_out(out: Path) -> None:
    from memkiln.io.memory_files import OutputRoot

    OutputRoot(out)


@app.command("publish")
def publish_command(
    to: opt.ToOpt = None,
    dry_run: opt.DryRunOpt = None,
    remove: opt.RemoveOpt = False,
    project: opt.PublishProjectOpt = None,
    codex_alongside: opt.AlongsideOpt = None,
    db: opt.DbOpt = None,
    out: opt.OutOpt = None,
    config: opt.ConfigOpt = None,
) -> int:
    """Place each project's memory where the agents load it at session start: a marked block
    in Claude Code's MEMORY.md and a topic file beside it, Oh My Pi's per-project
    memory_summary.md, and one global summary for Codex.

    Files memkiln did not write are never overwritten; a second publish changes nothing;
    --dry-run lists what would change and writes nothing. An agent that is not installed, or
    whose memory is off, is skipped with one line.
    """
    from memkiln.pipeline.publish import publish_store
    from memkiln.transforms.publish import TARGETS, publish_section

    settings = opt.settings_of(locals(), config)
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
        work=lambda _runner: publish_store(
            settings, targets=targets, remove=remove, project=project
        ),
        needs_prefect=lambda: False,  # publishing is file work: always in-process
    )
    if summary.dry_run:
        cout.print_steps(summary)
    caption = "dry run" if summary.dry_run else f"run {summary.run_id[:12]}"
    cout.print_sections([publish_section(summary)], summary.lines, caption)
    return EXIT_FAILURES if summary.failed() else EXIT_OK


@app.command()
@opt.options(*opt.SERVE_OPTIONS)
def serve(
    cron: opt.CronOpt = "0 3 * * *",
    name: opt.NameOpt = "nightly",
    **given: Any,
) -> None:
    """Serve the nightly flow (ingest, extract, consolidate) on a cron schedule, from this
    one long-lived process, against the Prefect server named by PREFECT_API_URL.

    The settings (config file, MEMKILN_* variables, these options) are read once, here,
    with paths made absolute, and become the deployment's parameters: restart serve after
    changing them. Each scheduled run shows its summary as an artifact in Prefect's UI.
    """
    settings = opt.settings_of(given, given["config"])
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
    from memkiln.flows.serving import serve_nightly

    signum = serve_nightly(settings, name=name, cron=cron)
    if signum is not None:
        import signal

        sys.stderr.write(
            f"error: interrupted by {signal.Signals(signum).name}: serve stopped; a flow run "
            "in progress is cancelled (Cancelled in Prefect), the next run closes its records\n"
        )
        raise typer.Exit(128 + signum)


@app.command("config")
@opt.options(*opt.CONFIG_OPTIONS)
def show_config(
    as_json: opt.ConfigJsonOpt = False,
    **given: Any,
) -> None:
    """Print the effective settings, each with where its value came from: command line,
    MEMKILN_* environment variable, config file (--config or MEMKILN_CONFIG), or default.

    Takes every option of the other commands, to show what they would use. Nothing runs.
    """
    from memkiln.settings import config_path

    effective, origins = opt.settings_and_sources(given, given["config"])
    cout.print_config(effective, origins, config_path(given["config"]), as_json=as_json)


@app.command()
def report(
    report_file: opt.ReportFileOpt = Path("report.html"),
    db: opt.DbOpt = None,
    out: opt.MemoriesOpt = None,
    config: opt.ConfigOpt = None,
) -> None:
    """Write one self-contained HTML report of the database: the last run, what failed and
    why, what it cost, the projects (linked to their memory folders) and charts. It opens
    offline: the chart library and the data are inside the file. The database is only read."""
    from memkiln.io.html_report import write_report

    settings = opt.settings_of({"db": db, "out": out}, config)
    if report_file.is_dir():
        raise ConfigError(f"--out {report_file} is a folder: give the HTML file to write")
    done = write_report(settings.db, report_file, memories=settings.out)
    cout.stdout_console().print(
        f"wrote {done.path} ({done.bytes / 1e6:.1f} MB): {done.charts} charts, "
        f"{done.projects} projects, in {done.seconds:.1f} s",
        highlight=False,
        markup=False,
    )


@app.command()
def show(
    project: opt.ProjectArg,
    db: opt.DbOpt = None,
    out: opt.OutOpt = None,
    config: opt.ConfigOpt = None,
) -> None:
    """Print a project's memory_summary.md: what an agent loads at the start of a session.

    A name that matches several projects, or none, is an error that lists the candidates.
    """
    from memkiln.io.status import memory_summary

    settings = opt.settings_of(locals(), config)
    sys.stdout.write(memory_summary(settings.db, settings.out, project))


@app.command("render-input")
def render_input(
    file: opt.RolloutFileArg,
    context_window: opt.WindowOpt = None,
    show_system: opt.SystemOpt = False,
    config: opt.ConfigOpt = None,
) -> None:
    """Print the exact stage-one user message a model would get for one rollout file.

    The message goes to stdout; the token count and the truncation decision go to stderr.
    Nothing is stored and no model is called: this is the audit of what a model would see.
    """
    from memkiln.io.rules import load_rules
    from memkiln.llm.requests import stage_one_input_for_file

    settings = opt.settings_of({"context_window": context_window}, config)
    result, facts = stage_one_input_for_file(
        file,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        rules=load_rules(),
    )
    cout.print_stage_one_input(result, facts, show_system=show_system)


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


@app.command()
def status(
    as_json: opt.StatusJsonOpt = False, db: opt.DbOpt = None, config: opt.ConfigOpt = None
) -> None:
    """Show the state of the store: job states, projects, the last runs and the top failure
    reasons. Reads the copy published for readers, so it answers while a run writes."""
    from memkiln.io.status import print_json, print_status, status_report

    report = status_report(opt.settings_of(locals(), config).db)
    if as_json:
        sys.stdout.write(print_json(report))
    else:
        print_status(report, cout.stdout_console())


@app.command()
def projects(
    as_json: opt.StatusJsonOpt = False, db: opt.DbOpt = None, config: opt.ConfigOpt = None
) -> None:
    """List the projects: sessions, items, last activity and memories, most recent first."""
    from memkiln.io.status import print_json, print_projects, project_list

    rows = project_list(opt.settings_of(locals(), config).db)
    if as_json:
        sys.stdout.write(print_json(rows))
    else:
        print_projects(rows, cout.stdout_console())


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


def run_cli(args: Sequence[str] | None = None) -> int:
    """Run the app and return the exit code; every error becomes one line on stderr."""
    import time

    from memkiln.flows.ephemeral import stop_ephemeral_server
    from memkiln.io.signals import interruptible, stopped_line

    cout.COMMAND_STARTED.append(time.monotonic())
    prefect_defaults()
    allocator_defaults()
    cout.help_width()
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
        return cout.fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
    except click_errors.ClickException as exc:
        return cout.fail(exc.format_message(), EXIT_USAGE)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return cout.fail("aborted", 130)
    except StoreLockedError as exc:
        return cout.fail(str(exc), EXIT_LOCKED)
    except MemkilnError as exc:
        return cout.fail(str(exc), EXIT_USAGE)
    except Interrupted as exc:
        sys.stderr.write(stopped_line(exc) + "\n")
        return 128 + exc.signum
    except RuntimeError as exc:
        from memkiln.flows.api_errors import prefect_api_line

        line = prefect_api_line(exc)  # Prefect's API out of reach: one line, exit 2
        if line is None:
            raise
        return cout.fail(line, EXIT_USAGE)
    return code if isinstance(code, int) else EXIT_OK


def main() -> None:
    """Console-script entry point."""
    from memkiln.io.signals import exiting

    code = run_cli()
    exiting(code)  # a stop while the process shuts down: one line, not a silent kill
    sys.exit(code)


if __name__ == "__main__":
    main()
