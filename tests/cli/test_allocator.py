"""The console script's process gives Polars' allocator its setting (``POLARS_ALLOCATOR_CONF``)
before Polars loads, and the C library's ``malloc`` its arenas (``MALLOC_ARENAS``); a setting
the user gave is kept."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from memkiln.constants import (
    MALLOC_ARENAS,
    MALLOC_ARENAS_ENV,
    POLARS_ALLOCATOR_CONF,
    POLARS_ALLOCATOR_ENV,
)

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


def _probe_line(script: str, name: str, given: str | None) -> str:
    """The last line ``script`` prints, run with the variable ``name`` set to ``given``
    (unset when None)."""
    env = {k: v for k, v in os.environ.items() if k != name}
    if given is not None:
        env[name] = given
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def _allocator_setting(given: str | None) -> str:
    return _probe_line(_PROBE, POLARS_ALLOCATOR_ENV, given)


def test_the_command_line_keeps_freed_pages_for_polars_longer() -> None:
    setting = _allocator_setting(None)
    assert setting.endswith(POLARS_ALLOCATOR_CONF)  # after Polars' own, so it wins


@pytest.mark.parametrize("given", ["narenas:2", "dirty_decay_ms:0,muzzy_decay_ms:0"])
def test_an_allocator_setting_in_the_environment_is_kept(given: str) -> None:
    setting = _allocator_setting(given)
    assert setting.endswith(given)
    assert POLARS_ALLOCATOR_CONF not in setting


#: Runs the command line as the console script does, then has eight threads allocate from the
#: C library's ``malloc`` at once, and prints how many arenas it has (``malloc_info``'s heaps)
#: and the variable worker processes inherit.
_ARENAS_PROBE = (
    "import ctypes, os, sys, tempfile, threading\n"
    "from memkiln.cli import run_cli\n"
    "run_cli(['--help'])\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.malloc.restype = ctypes.c_void_p\n"
    "libc.free.argtypes = (ctypes.c_void_p,)\n"
    "libc.fopen.restype = ctypes.c_void_p\n"
    "libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)\n"
    "libc.fclose.argtypes = (ctypes.c_void_p,)\n"
    "together = threading.Barrier(8)\n"
    "def work():\n"
    "    blocks = [libc.malloc(1 << 16) for _ in range(32)]\n"
    "    together.wait()\n"
    "    for b in blocks: libc.free(b)\n"
    "threads = [threading.Thread(target=work) for _ in range(8)]\n"
    "for t in threads: t.start()\n"
    "for t in threads: t.join()\n"
    "path = tempfile.mktemp()\n"
    "out = libc.fopen(path.encode(), b'w')\n"
    "libc.malloc_info(0, out)\n"
    "libc.fclose(out)\n"
    "print(open(path).read().count('<heap nr='), os.environ.get('MALLOC_ARENA_MAX'))\n"
    "os.unlink(path)\n"
)


def _arenas(given: str | None) -> tuple[int, str]:
    heaps, setting = _probe_line(_ARENAS_PROBE, MALLOC_ARENAS_ENV, given).split()
    return int(heaps), setting


glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="the C library is not glibc: its malloc has no arenas to limit",
)


@glibc
def test_the_command_line_keeps_the_c_librarys_arenas_few_whatever_its_threads() -> None:
    heaps, setting = _arenas(None)
    assert heaps <= MALLOC_ARENAS  # glibc's default: up to eight per core, one per thread
    assert setting == str(MALLOC_ARENAS)  # worker processes started later inherit it


@glibc
def test_an_arena_setting_in_the_environment_is_kept() -> None:
    heaps, setting = _arenas("6")
    assert setting == "6"
    assert MALLOC_ARENAS < heaps <= 6
