"""memkiln's settings: each one declared once, here.

Values come from (highest first) command-line options, ``MEMKILN_*`` environment variables,
the TOML file named by ``--config`` or ``MEMKILN_CONFIG``, then the defaults below.
``load_settings`` reads them all and remembers where each value came from (``memkiln
config`` prints that, and an invalid value is reported with its source).

``Options`` holds the fields as a plain pydantic model: it is what the Prefect flows take as
their parameter (JSON-serializable and validated by Prefect, so a deployment, ``serve`` and
the UI's form can call them). ``Settings`` is the same model read from the sources above.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from memkiln.constants import STAGE_ONE_MAX_OUTPUT_TOKENS
from memkiln.errors import ConfigError

DEFAULT_DB = Path("data/memkiln.duckdb")
DEFAULT_OUT = Path("data/memories")

#: Fields holding paths: relative paths in a config file are taken from the file's folder.
PATH_FIELDS = ("db", "archive", "out")

ENV_PREFIX = "MEMKILN_"
CONFIG_ENV = "MEMKILN_CONFIG"
#: ``MEMKILN_*`` variables that are not settings: the config file, and the home of
#: Prefect's state (read before the settings, see ``memkiln.cli``).
OTHER_ENV = (CONFIG_ENV, "MEMKILN_HOME")


#: Settings that were removed, with what to do instead: a config file or environment that
#: still sets one is read without it, with one warning line (it changed nothing already).
REMOVED = {
    "scan_limit": "it limited nothing; max_rollouts_per_run limits a run's extractions",
}


def removed_warning(name: str, where: str) -> str:
    """The warning for a removed setting ``name`` still set in ``where``."""
    return f"setting {name} ({where}) was removed and is ignored: {REMOVED[name]}; delete it"


#: ``model_dump(mode="json", context=AS_GIVEN)`` keeps the paths and the base URL as they are
#: (serve's deployment parameters, ``memkiln config``). Any other JSON form of the options, such
#: as the parameters Prefect stores for every flow run, holds them redacted: a path or URL can
#: hold a token (``/data/token=ghp_…/archive``, ``https://user:pass@host``).
AS_GIVEN = {"values": "as given"}


class Options(BaseModel):
    """memkiln's user settings (the flows' parameters)."""

    model_config = ConfigDict(extra="forbid")

    db: Path = Field(DEFAULT_DB, description="DuckDB file that holds every stage's output.")
    archive: Path | None = Field(
        None,
        description="Directory of rollout files (*.jsonl, *.jsonl.gz, *.jsonl.zst), searched "
        "recursively: Codex sessions, Claude Code transcripts, Pi sessions.",
    )
    out: Path = Field(DEFAULT_OUT, description="Directory the memory files are written to.")
    batch_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Raw bytes loaded and normalized per batch."
    )
    progress: bool = Field(True, description="Show progress bars (on a terminal only).")
    prefect: bool = Field(
        True,
        description="Run commands as Prefect flows (an ephemeral API unless PREFECT_API_URL is "
        "set); false runs the same code in this process alone.",
    )
    task_runner: Literal["thread", "dask"] = Field(
        "thread",
        description="Where a Prefect run's stateless tasks (ingest batches, project files) "
        "execute: thread (this process) or dask (a local cluster of worker processes, or "
        "the cluster at dask_address); this process stays the only DuckDB writer.",
    )
    dask_address: str | None = Field(
        None,
        description="Scheduler of an existing Dask cluster (tcp://host:8786) for "
        "task_runner dask; none starts a local cluster for the run.",
    )

    # Phase 1: which sessions are extracted
    sources: Annotated[list[Literal["cli", "vscode", "exec", "mcp", "unknown"]], NoDecode] = Field(
        ["cli", "vscode"],
        description="Session sources to extract (comma-separated: cli, vscode, exec, mcp, "
        "unknown; add exec for scripted runs).",
    )
    max_rollout_age_days: float = Field(
        10, gt=0, description="Nightly runs skip sessions last updated longer ago than this."
    )
    min_rollout_idle_hours: float = Field(
        6, ge=0, description="A session updated more recently than this may still be running."
    )
    max_rollouts_per_run: int = Field(1000, gt=0, description="Extractions per run at most.")
    backfill: bool = Field(False, description="Ignore the age limit (a backfill over history).")
    retry_budget: int = Field(3, ge=1, description="Attempts per version of a session.")
    retry_delay_hours: float = Field(1, ge=0, description="Wait after a failure before retrying.")
    lease_seconds: int = Field(3600, gt=0, description="How long a running job is held.")

    # Phase 1: the model
    backend: Literal["heuristic", "openai", "openai-batch"] = Field(
        "heuristic",
        description="heuristic (offline, rule-based), openai (any OpenAI-compatible API, "
        "key from OPENAI_API_KEY) or openai-batch (OpenAI's Batch API: half price, answers "
        "applied by a later run).",
    )
    model: str = Field("gpt-5-mini", description="Model name sent to the openai backend.")
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."
    )
    api: Literal["chat", "responses"] = Field(
        "chat", description="chat (Chat Completions, works everywhere) or responses."
    )
    context_window: int | None = Field(
        None,
        gt=0,
        description="The model's context window in tokens (the input gets 95% x 70%, less when "
        "the prompt and the output reserve need more; unset: a 150,000-token budget).",
    )
    concurrency: int = Field(
        8,
        ge=1,
        le=256,
        description="Model requests in flight at most (fewer while the service's rate limits "
        "say so).",
    )
    request_timeout_s: float = Field(
        120, ge=0.1, description="Seconds before a model request times out."
    )
    max_retries: int = Field(
        4, ge=0, description="Retries of a request after 429, 5xx, a timeout or a lost connection."
    )
    max_output_tokens: int = Field(
        STAGE_ONE_MAX_OUTPUT_TOKENS, gt=0, description="Output tokens a stage-one answer may use."
    )
    max_memories_per_project: int = Field(
        256, gt=0, description="Stage-one memories consolidated per project at most."
    )

    # Backfill, estimates and spending
    since: date | None = Field(
        None, description="Backfill: only sessions active on or after this date (YYYY-MM-DD)."
    )
    until: date | None = Field(
        None, description="Backfill: only sessions started on or before this date (YYYY-MM-DD)."
    )
    dry_run: bool = Field(
        False,
        description="Call no model: count the sessions to do and estimate their tokens and cost.",
    )
    budget_usd: float | None = Field(
        None,
        gt=0,
        description="A hard cap on the spend in USD (phase 1 and 2 together): each request's "
        "worst case is reserved before it is sent; once the next one does not fit, the run "
        "stops sending and the next run goes on.",
    )
    wait: bool = Field(
        False,
        description="openai-batch: submit, then poll and apply every batch until all have "
        "ended, in one command.",
    )
    poll_interval_s: float = Field(
        60.0, gt=0, description="openai-batch with --wait: seconds between two polls."
    )
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="USD per million (input, output) tokens by model name, overriding or adding "
        'to the prices of the genai-prices package, e.g. {"my-model": [0.2, 0.8]}.',
    )

    # Publishing into the agents' read paths
    publish: Annotated[list[Literal["claude", "omp", "codex"]], NoDecode] = Field(
        [],
        description="Agents a run publishes each project's memory to as its last phase, and "
        "'memkiln publish' without --to (comma-separated: claude, omp, codex; none: run does "
        "not publish, publish does all three).",
    )
    codex_alongside: bool = Field(
        False,
        description="Publish to Codex even when its memory folder holds Codex's own memory "
        "(memkiln's summary goes in a marked block at the top of its memory_summary.md).",
    )

    @field_validator("sources", "publish", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """``cli,vscode`` (a command line, an environment variable) or a JSON/TOML list."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _since_not_after_until(self) -> Options:
        """A backfill window that ends before it starts is a mistake, not an empty night."""
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError(f"since ({self.since}) is after until ({self.until})")
        return self

    @field_serializer("db", "archive", "out", "base_url", when_used="json")
    def _redacted(self, value: Path | str | None, info: SerializationInfo) -> str | None:
        if value is None:
            return None
        text = str(value)
        if (info.context or {}).get("values") == AS_GIVEN["values"]:
            return text
        from memkiln.io.rules import load_rules
        from memkiln.transforms.redact import redact_text

        return redact_text(text, rules=load_rules())


class TomlFileSource(PydanticBaseSettingsSource):
    """The ``MEMKILN_CONFIG`` (or ``--config``) TOML file: top-level keys are setting names;
    relative paths are taken from the file's folder, so a scheduled run does not depend on
    the directory it starts in."""

    def __init__(
        self, settings_cls: type[BaseSettings], path: Path | None, origin: str = CONFIG_ENV
    ) -> None:
        super().__init__(settings_cls)
        self.path = path
        self.origin = origin  # how the file was named, for messages

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        name = f"config file {self.path} ({self.origin})"
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{name} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name} cannot be read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{name} is not valid TOML: {exc}") from None
        for gone in REMOVED.keys() & data.keys():
            del data[gone]
            logging.getLogger("memkiln").warning(removed_warning(gone, f"config file {self.path}"))
        base = self.path.resolve().parent
        for name in PATH_FIELDS:
            value = data.get(name)
            if isinstance(value, str) and value:
                data[name] = str(base / Path(value).expanduser())
        return data


def config_path(explicit: Path | None = None) -> Path | None:
    """The config file: ``--config`` if given, else ``MEMKILN_CONFIG``, else none."""
    if explicit is not None:
        return explicit
    named = os.environ.get(CONFIG_ENV)
    return Path(named) if named else None


class Settings(Options, BaseSettings):
    """memkiln's settings, read from the environment and the config file."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlFileSource(settings_cls, config_path()))

    @classmethod
    def from_options(cls, options: Options) -> Settings:
        """The settings a flow run was given: already validated, and complete, so neither
        the environment nor a config file is read again."""
        return cls.model_construct(**dict(options))


@dataclass(frozen=True)
class Source:
    """Where a setting's value came from."""

    kind: Literal["default", "config", "env", "cli"]
    name: str = ""  # the option, the variable or the file

    def __str__(self) -> str:
        return {
            "default": "default",
            "config": f"config file {self.name}",
            "env": f"environment {self.name}",
            "cli": f"command line {self.name}",
        }[self.kind]


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def load_settings(
    cli: dict[str, Any] | None = None,
    *,
    flags: dict[str, str] | None = None,
    config: Path | None = None,
) -> tuple[Settings, dict[str, Source]]:
    """Settings from every source, and the source of each value.

    ``cli`` holds only the options given on the command line (by field name; ``flags`` names
    the option each came from). Any problem, from any source, is a ``ConfigError`` whose one
    line names the setting and where its value came from.
    """
    cli = cli or {}
    flags = flags or {}
    path = config_path(config)
    from_file = TomlFileSource(Settings, path, "--config" if config else CONFIG_ENV)()
    known = {env_name(name) for name in Settings.model_fields} | set(OTHER_ENV)
    gone = {env_name(name): name for name in REMOVED}
    for key in sorted(k for k in os.environ if k.upper() in gone):
        logging.getLogger("memkiln").warning(removed_warning(gone[key.upper()], "environment"))
    unknown = sorted(
        k
        for k in os.environ
        if k.upper().startswith(ENV_PREFIX) and k.upper() not in known and k.upper() not in gone
    )
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]} (environment); see 'memkiln config'")
    try:
        from_env = EnvSettingsSource(Settings)()
    except SettingsError as exc:  # e.g. MEMKILN_PRICES that is not JSON
        raise ConfigError(f"invalid environment variable: {exc}") from None
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {name: Source("default") for name in Settings.model_fields}
    for layer, kind in ((from_file, "config"), (from_env, "env"), (cli, "cli")):
        for name, value in layer.items():
            values[name] = value
            label = {"config": str(path), "env": env_name(name), "cli": flags.get(name, name)}
            sources[name] = Source(kind, label[kind])  # type: ignore[arg-type]  # a kind named above
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc, sources)) from None
    return settings, sources


def describe_invalid(exc: ValidationError, sources: dict[str, Source]) -> str:
    """One line for the first problem of a ``ValidationError`` of ``Settings``."""
    errors = exc.errors()
    first = errors[0]
    name = ".".join(str(part) for part in first["loc"]) or "settings"
    top = str(first["loc"][0]) if first["loc"] else name
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    where = sources.get(top, Source("config", "?"))
    if first["type"] == "extra_forbidden":
        return f"unknown setting {top!r} in {where}{more}"
    if not first["loc"]:  # a rule over several settings: its message names them
        return f"invalid settings: {first['msg'].removeprefix('Value error, ')}{more}"
    given = first.get("input")
    return f"invalid setting {name} = {given!r} ({where}): {first['msg']}{more}"


def openai_api_key(settings: Options) -> str:
    """The key the openai backend sends: ``OPENAI_API_KEY``, or a placeholder for a local
    server (``base_url`` set), which usually needs none."""
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    if settings.base_url is None and not settings.dry_run:  # a dry run sends nothing
        raise ConfigError(
            "the openai backend needs OPENAI_API_KEY (or --base-url for a local server)"
        )
    return "unused"


def check_backend(settings: Options) -> None:
    """Fail before any work starts when the chosen backend or task runner cannot be used."""
    if settings.backend in ("openai", "openai-batch"):
        openai_api_key(settings)
    check_runner(settings)


def check_runner(settings: Options) -> None:
    """Fail before any work starts when the task runner cannot be used."""
    if settings.task_runner == "dask" and not settings.prefect:
        raise ConfigError(
            "task_runner dask runs the work as Prefect tasks: it cannot be combined with "
            "--no-prefect (prefect = false)"
        )


def masked(name: str, value: Any) -> str:
    """A setting's value as ``memkiln config`` prints it: credentials in a URL are hidden."""
    text = "" if value is None else str(value)
    if name == "base_url" and "@" in text and "://" in text:
        scheme, rest = text.split("://", 1)
        text = f"{scheme}://****@{rest.split('@', 1)[1]}"
    if isinstance(value, list):
        text = ",".join(str(v) for v in value)
    if isinstance(value, dict):
        text = ", ".join(f"{k}={'/'.join(map(str, v))}" for k, v in value.items())
    return text
