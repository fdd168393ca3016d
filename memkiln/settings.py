"""One settings object, built at the entry point and passed down.

Values come from (highest first) command-line options, ``MEMKILN_*`` environment variables,
an optional TOML file named by ``MEMKILN_CONFIG``, then the defaults below.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_DB = Path("data/memkiln.duckdb")
DEFAULT_OUT = Path("data/memories")


class Settings(BaseSettings):
    """memkiln's user settings."""

    model_config = SettingsConfigDict(env_prefix="MEMKILN_", extra="forbid")

    db: Path = Field(DEFAULT_DB, description="DuckDB file that holds every stage's output.")
    archive: Path | None = Field(None, description="Directory of rollout files to ingest.")
    out: Path = Field(DEFAULT_OUT, description="Directory the memory files are written to.")
    batch_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="Raw bytes loaded and normalized per batch."
    )
    progress: bool = Field(True, description="Show a progress bar on a terminal.")

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
