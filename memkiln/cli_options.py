"""The command line's options, each written once: a setting's option (its help is the
setting's description, its environment variable and its default), the options' types
(``DbOpt``, …), the groups commands share, and the decorator that gives a command the
options it names (``options``). Every option maps onto one setting of
``memkiln.settings`` and has no default of its own: only the options given are passed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from memkiln.settings import Options, Settings, Source, env_name, load_settings

F = TypeVar("F", bound=Callable[..., Any])

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


def option(param: str, *names: str, text: str = "") -> Any:
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


DbOpt = Annotated[Path | None, option("db", "--db")]
ArchiveOpt = Annotated[
    Path | None,
    option("archive", "--archive", "-a"),
]
OutOpt = Annotated[Path | None, option("out", "--out")]
BatchOpt = Annotated[int | None, option("batch_bytes", "--batch-bytes")]
#: The former name of --batch-bytes, in MiB: still accepted, no longer shown.
BatchMbOpt = Annotated[
    int | None,
    typer.Option("--batch-mb", hidden=True, help="--batch-bytes in MiB (the former option)."),
]
ProgressOpt = Annotated[bool | None, option("progress", "--progress/--no-progress")]
PrefectOpt = Annotated[bool | None, option("prefect", "--prefect/--no-prefect")]
RunnerOpt = Annotated[str | None, option("task_runner", "--task-runner")]
DaskOpt = Annotated[str | None, option("dask_address", "--dask-address")]
BackendOpt = Annotated[str | None, option("backend", "--backend")]
ModelOpt = Annotated[str | None, option("model", "--model")]
BaseUrlOpt = Annotated[str | None, option("base_url", "--base-url")]
ApiOpt = Annotated[str | None, option("api", "--api")]
ConcurrencyOpt = Annotated[int | None, option("concurrency", "--concurrency")]
WindowOpt = Annotated[int | None, option("context_window", "--context-window")]
BackfillOpt = Annotated[
    bool | None,
    option(
        "backfill",
        "--backfill/--nightly",
        text="--backfill takes sessions of any age (a backfill over history); --nightly skips "
        "those older than max_rollout_age_days.",
    ),
]
# each option is named as its setting (and its MEMKILN_* variable); the shorter names they had
# before are still accepted
MaxAgeOpt = Annotated[
    float | None, option("max_age_days", "--max-rollout-age-days", "--max-age-days")
]
IdleOpt = Annotated[
    float | None, option("min_idle_hours", "--min-rollout-idle-hours", "--min-idle-hours")
]
LimitOpt = Annotated[int | None, option("max_rollouts", "--max-rollouts-per-run", "--max-rollouts")]
SourcesOpt = Annotated[str | None, option("sources", "--sources")]
TimeoutOpt = Annotated[float | None, option("timeout", "--request-timeout-s", "--timeout")]
RetriesOpt = Annotated[int | None, option("max_retries", "--max-retries")]
SinceOpt = Annotated[str | None, option("since", "--since")]
UntilOpt = Annotated[str | None, option("until", "--until")]
DryRunOpt = Annotated[bool | None, option("dry_run", "--dry-run/--no-dry-run")]
BudgetOpt = Annotated[float | None, option("budget_usd", "--budget-usd")]
PublishOpt = Annotated[str | None, option("publish", "--publish")]
AlongsideOpt = Annotated[
    bool | None, option("codex_alongside", "--codex-alongside/--no-codex-alongside")
]
WaitOpt = Annotated[bool | None, option("wait", "--wait/--no-wait")]
PollOpt = Annotated[float | None, option("poll_interval", "--poll-interval-s", "--poll-interval")]
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


def settings_of(params: dict[str, Any], config: Path | None = None) -> Settings:
    """Settings from the options given to a command (``None``: not given) and the other
    sources."""
    settings, _ = settings_and_sources(params, config)
    return settings


def settings_and_sources(
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


StatusJsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of tables.")
]


#: Options of one command each.
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="Only this project (its key or its folder name)."),
]
ToOpt = Annotated[
    str | None,
    typer.Option(
        "--to",
        help="The agents, comma-separated: claude (Claude Code's auto memory), omp (Oh My "
        "Pi), codex (Codex's global memory) [default: the publish setting, else all three].",
        show_default=False,
    ),
]
RemoveOpt = Annotated[
    bool,
    typer.Option(
        "--remove",
        help="Take back what memkiln published: its block out of files it changed (their "
        "other bytes as before), the files and folders it created deleted.",
    ),
]
PublishProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="Only this project (its key, folder, directory or name)."),
]
CronOpt = Annotated[
    str,
    typer.Option(
        "--cron",
        help="When the nightly run starts (cron syntax, the server's time zone is UTC).",
    ),
]
NameOpt = Annotated[str, typer.Option("--name", help="Name of the deployment in Prefect.")]
ConfigJsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON: {setting: {value, source}}.")
]
ReportFileOpt = Annotated[
    Path,
    typer.Option("--out", "-o", help="The HTML file to write.", show_default=True),
]
MemoriesOpt = Annotated[
    Path | None,
    option("out", "--memories", text="Directory of the memory files the project table links to."),
]
ProjectArg = Annotated[
    str,
    typer.Argument(
        help="The project: its git remote in any form (https://github.com/acme/shop, "
        "git@github.com:acme/shop.git, github.com/acme/shop), a directory its sessions ran "
        "in, its memory folder, or a unique part of its name (shop)."
    ),
]
RolloutFileArg = Annotated[
    Path,
    typer.Argument(
        help="One rollout file (.jsonl, .jsonl.gz or .jsonl.zst) of any supported format.",
        show_default=False,
    ),
]
SystemOpt = Annotated[
    bool,
    typer.Option("--system", help="Print the system prompt before the user message."),
]

#: Every shared option by its parameter name: a command names those it takes (``options``).
SHARED: dict[str, Any] = {
    "archive": ArchiveOpt,
    "since": SinceOpt,
    "until": UntilOpt,
    "db": DbOpt,
    "out": OutOpt,
    "batch_bytes": BatchOpt,
    "batch_mb": BatchMbOpt,
    "backend": BackendOpt,
    "model": ModelOpt,
    "base_url": BaseUrlOpt,
    "api": ApiOpt,
    "concurrency": ConcurrencyOpt,
    "context_window": WindowOpt,
    "backfill": BackfillOpt,
    "max_age_days": MaxAgeOpt,
    "min_idle_hours": IdleOpt,
    "max_rollouts": LimitOpt,
    "sources": SourcesOpt,
    "timeout": TimeoutOpt,
    "max_retries": RetriesOpt,
    "dry_run": DryRunOpt,
    "budget_usd": BudgetOpt,
    "publish": PublishOpt,
    "codex_alongside": AlongsideOpt,
    "wait": WaitOpt,
    "poll_interval": PollOpt,
    "progress": ProgressOpt,
    "prefect": PrefectOpt,
    "task_runner": RunnerOpt,
    "dask_address": DaskOpt,
    "config": ConfigOpt,
}

#: The groups of options commands share, in the order their help lists them.
READ = ("batch_bytes", "batch_mb")
MODEL = ("backend", "model", "base_url", "api", "concurrency", "context_window")
SELECT = ("backfill", "max_age_days", "min_idle_hours", "max_rollouts", "sources")
CALLS = ("timeout", "max_retries")
COST = ("dry_run", "budget_usd")
PUBLISH = ("publish", "codex_alongside")
WAIT = ("wait", "poll_interval")
RUNNER = ("progress", "prefect", "task_runner", "dask_address", "config")


#: Each command's options, in the order its help lists them.
INGEST_OPTIONS = ("archive", "db", *READ, *RUNNER)
EXTRACT_OPTIONS = ("db", *MODEL, *SELECT, *CALLS, *COST, *WAIT, "as_json", *RUNNER)
RUN_OPTIONS = (
    "archive", "db", "out", *READ, *MODEL, *SELECT, *CALLS, *COST, *PUBLISH, *WAIT, "as_json",
    *RUNNER,
)  # fmt: skip
BACKFILL_OPTIONS = (
    "archive", "since", "until", "db", "out", *READ, *MODEL, *SELECT[2:], *CALLS, *COST, *WAIT,
    "as_json", *RUNNER,
)  # fmt: skip
CONSOLIDATE_OPTIONS = (
    "db", "out", "project", "backend", "model", "base_url", "context_window", *CALLS, *RUNNER,
)  # fmt: skip
SERVE_OPTIONS = ("cron", "name", "archive", "db", "out", "backend", "model", "base_url", "config")
CONFIG_OPTIONS = (
    "as_json", "archive", "db", "out", *READ, *MODEL, *SELECT, *CALLS, "since", "until", *COST,
    *PUBLISH, *WAIT, *RUNNER,
)  # fmt: skip


def options(*names: str) -> Callable[[F], F]:
    """Give a command the parameters ``names``, in that order: its own (declared in its
    signature) and the shared ones of ``SHARED`` (which reach it in ``**given``, ``None``
    when not given)."""

    def give(command: F) -> F:
        own = inspect.signature(command, eval_str=True)
        mine = {n: p for n, p in own.parameters.items() if p.kind is not p.VAR_KEYWORD}
        missing = set(mine) - set(names)
        assert not missing, f"{command.__name__}: {sorted(missing)} not placed"
        params = [
            mine[name].replace(kind=inspect.Parameter.KEYWORD_ONLY)
            if name in mine
            else inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=SHARED[name]
            )
            for name in names
        ]
        signature = own.replace(parameters=params)
        command.__signature__ = signature  # type: ignore[attr-defined]  # read by typer
        command.__annotations__ = {p.name: p.annotation for p in params} | {
            "return": signature.return_annotation
        }
        return command

    return give
