"""The maintained rule set (Betterleaks') is read from a cache file memkiln writes once per
installed version. A damaged cache (empty after a crash, cut short, holding no rules) must not
leave the rules out quietly, nor stop every command with a traceback: it is made again.

Run as a user runs it: ``memkiln redact`` with ``XDG_CACHE_HOME`` pointing at a temporary
folder, a token only Betterleaks' rules know (memkiln has no rule of its own for PlanetScale).
"""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REDACTED = "[REDACTED_SECRET]"
#: Format-valid, made up here: ``pscale_tkn_`` and 43 letters or digits.
_RNG = random.Random("planetscale")
PLANETSCALE = "pscale_tkn_" + "".join(
    _RNG.choice(string.ascii_letters + string.digits) for _ in range(43)
)


def redact(text: str, cache: Path) -> subprocess.CompletedProcess[str]:
    script = str(Path(sys.executable).with_name("memkiln"))
    env = os.environ | {"XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [script, "redact"], input=text, env=env, capture_output=True, text=True, timeout=120
    )


def header_only(data: bytes) -> bytes:
    """The file cut just before its first rule: valid TOML, no rules."""
    return data[: data.index(b"[[rules]]")]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda data: b"",
    "cut in a rule": lambda data: data[: len(data) // 2],
    "cut before the rules": header_only,
    "not utf-8": lambda data: b"\xff\xfe" + data,
}


def test_a_damaged_rule_cache_is_made_again_and_its_rules_still_run(tmp_path: Path) -> None:
    text = f"db: {PLANETSCALE}\n"
    first = redact(text, tmp_path)  # writes the cache
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"db: {REDACTED}\n"
    (cached,) = (tmp_path / "memkiln").glob("betterleaks-*.toml")
    whole = cached.read_bytes()
    for damage, make in DAMAGE.items():
        cached.write_bytes(make(whole))

        again = redact(text, tmp_path)

        assert again.returncode == 0, (damage, again.stderr[-2000:])
        assert again.stdout == f"db: {REDACTED}\n", damage
        assert cached.read_bytes() == whole, damage  # made again, whole
        assert [
            p.name for p in cached.parent.iterdir() if p.name.startswith(".")
        ] == []  # no temporary
