"""One settings object, built at the entry point and passed down.

Values come from (highest first) command-line options, ``MEMKILN_*`` environment variables,
an optional TOML file named by ``MEMKILN_CONFIG``, then the defaults below.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from memkiln.errors import ConfigError
from memkiln.transforms.prompts import STAGE_ONE_MAX_OUTPUT_TOKENS

DEFAULT_DB = Path("data/memkiln.duckdb")
DEFAULT_OUT = Path("data/memories")


class Settings(BaseSettings):
    """memkiln's user settings."""

    model_config = SettingsConfigDict(env_prefix="MEMKILN_", extra="forbid")

    db: Path = Field(DEFAULT_DB, description="DuckDB file that holds every stage's output.")
    archive: Path | None = Field(None, description="Directory of rollout files to ingest.")
    out: Path = Field(DEFAULT_OUT, description="Directory the memory files are written to.")
    batch_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Raw bytes loaded and normalized per batch."
    )

    # Phase 1: which sessions are extracted
    sources: list[str] = Field(
        ["cli", "vscode"],
        description="Session sources to extract (Codex's interactive ones by default; add "
        "'exec' for non-interactive runs).",
    )
    max_rollout_age_days: float = Field(
        10, gt=0, description="Nightly runs skip sessions last updated longer ago than this."
    )
    min_rollout_idle_hours: float = Field(
        6, ge=0, description="A session updated more recently than this may still be running."
    )
    max_rollouts_per_run: int = Field(1000, gt=0, description="Extractions per run at most.")
    scan_limit: int = Field(5000, gt=0, description="Most recent sessions considered per run.")
    backfill: bool = Field(False, description="Ignore the age limit (a backfill over history).")
    retry_budget: int = Field(3, ge=1, description="Attempts per version of a session.")
    retry_delay_hours: float = Field(1, ge=0, description="Wait after a failure before retrying.")
    lease_seconds: int = Field(3600, gt=0, description="How long a running job is held.")

    # Phase 1: the model
    backend: Literal["heuristic", "openai"] = Field(
        "heuristic", description="heuristic (offline, rule-based) or openai (any compatible API)."
    )
    model: str = Field("gpt-5-mini", description="Model name sent to the openai backend.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (default: OpenAI).")
    api: Literal["chat", "responses"] = Field(
        "chat", description="Chat Completions (works everywhere) or the Responses API."
    )
    context_window: int | None = Field(
        None, gt=0, description="The model's context window in tokens (None: 150k-token budget)."
    )
    concurrency: int = Field(8, ge=1, le=256, description="Model requests in flight at most.")
    request_timeout_s: float = Field(120, gt=0, description="Seconds before a request times out.")
    max_retries: int = Field(
        4, ge=0, description="Retries for 429, 5xx, timeouts, connection errors."
    )
    max_output_tokens: int = Field(
        STAGE_ONE_MAX_OUTPUT_TOKENS, gt=0, description="Output tokens a stage-one answer may use."
    )
    max_memories_per_project: int = Field(
        256, gt=0, description="Stage-one memories consolidated per project at most."
    )
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: {
            "gpt-5-mini": (0.25, 2.0),
            "gpt-5": (1.25, 10.0),
            "gpt-5-nano": (0.05, 0.4),
            "gpt-4.1-mini": (0.4, 1.6),
        },
        description="USD per million (input, output) tokens, by model name.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("MEMKILN_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


def load_settings(**values: Any) -> Settings:
    """``Settings(**values)``, with every problem of a value, an environment variable or the
    ``MEMKILN_CONFIG`` file turned into a ``ConfigError`` that names the setting."""
    config = os.environ.get("MEMKILN_CONFIG")
    if config and not Path(config).is_file():
        raise ConfigError(f"MEMKILN_CONFIG names {config}, which is not a file")
    try:
        return Settings(**values)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"MEMKILN_CONFIG file {config} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from None


def describe_invalid(exc: ValidationError) -> str:
    """One line for the first problem of a ``ValidationError`` of ``Settings``."""
    errors = exc.errors()
    first = errors[0]
    name = ".".join(str(part) for part in first["loc"]) or "settings"
    top = str(first["loc"][0]) if first["loc"] else name
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    where = f"an option, MEMKILN_{top.upper()} or MEMKILN_CONFIG"
    if first["type"] == "extra_forbidden":
        return f"unknown setting {name!r} (in MEMKILN_CONFIG?){more}"
    return f"invalid setting {name} = {first.get('input')!r} ({where}): {first['msg']}{more}"


def openai_api_key(settings: Settings) -> str:
    """The key the openai backend sends: ``OPENAI_API_KEY``, or a placeholder for a local
    server (``base_url`` set), which usually needs none."""
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    if settings.base_url is None:
        raise ConfigError(
            "the openai backend needs OPENAI_API_KEY (or --base-url for a local server)"
        )
    return "unused"


def check_backend(settings: Settings) -> None:
    """Fail before any work starts when the chosen backend cannot be used."""
    if settings.backend == "openai":
        openai_api_key(settings)
