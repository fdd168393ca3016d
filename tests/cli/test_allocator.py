"""The console script's process gives Polars' allocator its setting (``POLARS_ALLOCATOR_CONF``)
before Polars loads, and a setting the user gave is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memkiln.constants import POLARS_ALLOCATOR_CONF, POLARS_ALLOCATOR_ENV

#: Runs the command line as the console script does, then loads Polars (as a command does)
#: and prints the allocator setting Polars' allocator reads when it loads (its own first, then
#: the environment's: the last value of an option wins).
_PROBE = (
    "import os, sys\n"
    "from memkiln.cli import run_cli\n"
    "assert 'polars' not in sys.modules\n"
    "run_cli(['--help'])\n"
    "import polars\n"
    f"print(os.environ[{POLARS_ALLOCATOR_ENV!r}])\n"
)


def _allocator_setting(given: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != POLARS_ALLOCATOR_ENV}
    if given is not None:
        env[POLARS_ALLOCATOR_ENV] = given
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_the_command_line_keeps_freed_pages_for_polars_longer() -> None:
    setting = _allocator_setting(None)
    assert setting.endswith(POLARS_ALLOCATOR_CONF)  # after Polars' own, so it wins


@pytest.mark.parametrize("given", ["narenas:2", "dirty_decay_ms:0,muzzy_decay_ms:0"])
def test_an_allocator_setting_in_the_environment_is_kept(given: str) -> None:
    setting = _allocator_setting(given)
    assert setting.endswith(given)
    assert POLARS_ALLOCATOR_CONF not in setting
