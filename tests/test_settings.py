"""Settings: one declaration each, four sources, one line naming the setting and its source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memkiln.errors import ConfigError
from memkiln.settings import Options, Settings, load_settings
from memkiln.transforms.report import exit_code, markdown

#: A value per setting for each source, all different from the defaults and each other.
LAYERS: dict[str, tuple[Any, Any, Any]] = {
    # setting: (config file, environment, command line)
    "db": ("cfg.duckdb", "env.duckdb", "cli.duckdb"),
    "archive": ("cfg-archive", "env-archive", "cli-archive"),
    "out": ("cfg-out", "env-out", "cli-out"),
    "batch_bytes": (1000, 2000, 3000),
    "backend": ("openai", "heuristic", "openai"),
    "model": ("cfg-model", "env-model", "cli-model"),
    "base_url": ("http://cfg/v1", "http://env/v1", "http://cli/v1"),
    "api": ("responses", "chat", "responses"),
    "concurrency": (3, 5, 7),
    "context_window": (100_000, 200_000, 300_000),
    "backfill": (True, False, True),
    "max_rollout_age_days": (2.5, 3.5, 4.5),
    "min_rollout_idle_hours": (0.5, 1.5, 2.5),
    "max_rollouts_per_run": (11, 22, 33),
    "sources": (["exec"], ["cli", "mcp"], ["vscode"]),
    "request_timeout_s": (11.0, 22.0, 33.0),
    "max_retries": (1, 2, 3),
    "progress": (False, True, False),
    "prefect": (False, True, False),
    "task_runner": ("dask", "thread", "dask"),
    "dask_address": ("tcp://cfg:8786", "tcp://env:8786", "tcp://cli:8786"),
}


def env_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def toml_text(values: dict[str, Any]) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def expected(name: str, value: Any, base: Path) -> Any:
    if name in ("db", "archive", "out"):
        return str(base / value)
    return value


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for key in list(os.environ):
        if key.startswith("MEMKILN_"):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_each_source_wins_over_the_ones_below_it(
    name: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    cfg_value, env_value, cli_value = LAYERS[name]
    config = tmp_path / "conf" / "memkiln.toml"
    config.parent.mkdir()
    default = Options.model_fields[name].get_default(call_default_factory=True)

    settings, sources = load_settings()
    assert getattr(settings, name) == default and str(sources[name]) == "default"

    config.write_text(toml_text({name: cfg_value}))
    settings, sources = load_settings(config=config)
    got = getattr(settings, name)
    assert (str(got) if isinstance(got, Path) else got) == expected(name, cfg_value, config.parent)
    assert str(sources[name]) == f"config file {config}"

    clean_env.setenv(f"MEMKILN_{name.upper()}", env_text(env_value))
    settings, sources = load_settings(config=config)
    got = getattr(settings, name)
    assert (str(got) if isinstance(got, Path) else got) == env_value
    assert str(sources[name]) == f"environment MEMKILN_{name.upper()}"

    settings, sources = load_settings({name: cli_value}, flags={name: "--x"}, config=config)
    got = getattr(settings, name)
    assert (str(got) if isinstance(got, Path) else got) == cli_value
    assert str(sources[name]) == "command line --x"


def test_the_config_file_can_be_named_by_memkiln_config(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "memkiln.toml"
    config.write_text('db = "/data/m.duckdb"\nbackfill = true\n')
    clean_env.setenv("MEMKILN_CONFIG", str(config))
    settings, sources = load_settings()
    assert settings.db == Path("/data/m.duckdb") and settings.backfill
    assert str(sources["db"]) == f"config file {config}"
    # the settings object alone reads the same sources
    assert Settings().db == Path("/data/m.duckdb")


@pytest.mark.parametrize(
    ("layer", "words"),
    [
        ("config", ["concurrency", "config file", "greater than or equal to 1"]),
        ("env", ["concurrency", "environment MEMKILN_CONCURRENCY"]),
        ("cli", ["concurrency", "command line --concurrency"]),
    ],
)
def test_an_invalid_value_names_the_setting_and_its_source(
    layer: str, words: list[str], tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "memkiln.toml"
    config.write_text("concurrency = 0\n" if layer == "config" else "")
    if layer == "env":
        clean_env.setenv("MEMKILN_CONCURRENCY", "many")
    cli = {"concurrency": -1} if layer == "cli" else {}
    with pytest.raises(ConfigError) as err:
        load_settings(cli, flags={"concurrency": "--concurrency"}, config=config)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_a_comma_list_rejects_unknown_members(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMKILN_SOURCES", "cli,vscod")
    with pytest.raises(ConfigError, match=r"sources\.1 = 'vscod'.*MEMKILN_SOURCES"):
        load_settings()


def test_unknown_keys_in_the_config_file_are_refused(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "memkiln.toml"
    config.write_text("bakcend = 'openai'\n")
    with pytest.raises(ConfigError, match="unknown setting 'bakcend' in config file"):
        load_settings(config=config)


def test_a_mistyped_environment_variable_is_refused(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMKILN_BAKCEND", "openai")
    with pytest.raises(ConfigError, match="unknown setting MEMKILN_BAKCEND"):
        load_settings()


def test_a_missing_config_file_is_an_error(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config=tmp_path / "nope.toml")


def test_flow_parameters_survive_json_as_a_deployment_sends_them() -> None:
    options = Options(db=Path("/d/m.duckdb"), archive=Path("/a"), sources=["cli", "exec"])
    sent = json.loads(json.dumps(options.model_dump(mode="json")))
    assert Options.model_validate(sent) == options
    assert Settings.from_options(options).archive == Path("/a")


def test_any_failed_session_or_project_means_exit_code_1() -> None:
    assert exit_code(sessions_failed=0, projects_failed=0) == 0
    assert exit_code(sessions_failed=2, projects_failed=0) == 1
    assert exit_code(sessions_failed=0, projects_failed=1) == 1


def test_the_summary_artifact_is_a_markdown_table_per_phase() -> None:
    text = markdown("memkiln run", [("memkiln extract", [("model requests", "3")])], ["a|b"])
    assert "## memkiln extract" in text and "| model requests | 3 |" in text
    assert "a\\|b" in text
