"""The environment a memkiln process sets for itself before anything imports Prefect or
Polars (both read their settings when imported); a value already in the environment is kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from pathlib import Path


def prefect_defaults() -> None:
    """Defaults that make Prefect quiet, offline and self-contained (set before anything
    imports Prefect, which reads its settings at import time). Run logs (INFO) go to the
    API, where the UI shows them; the terminal gets warnings only."""
    home = Path(os.environ.get("MEMKILN_HOME", Path.home() / ".memkiln")).expanduser()
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    if not os.environ.get("PREFECT_API_URL"):
        # the temporary API server shares the terminal: when a scheduler stops the process
        # group it is stopped too, and its services log the cancelled flush of their events
        # as an error with a traceback, after the run's own one line; its failures reach
        # memkiln through the API anyway
        os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    # Prefect creates its home at import, without parents, and warns when it cannot (also
    # under --no-prefect); a home that cannot be made is reported when a flow needs it
    with contextlib.suppress(OSError):
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)


def allocator_defaults() -> None:
    """The allocators' settings for a memkiln process, a value already in the environment
    kept: Polars' (``POLARS_ALLOCATOR_CONF``), before anything imports Polars, whose allocator
    reads it once, when loaded; and the C library's arenas (``MALLOC_ARENAS``), set for this
    process (``mallopt``, before it starts its threads) and in the environment. Worker
    processes started later inherit both."""
    from memkiln.constants import (
        MALLOC_ARENAS,
        MALLOC_ARENAS_ENV,
        POLARS_ALLOCATOR_CONF,
        POLARS_ALLOCATOR_ENV,
    )

    os.environ.setdefault(POLARS_ALLOCATOR_ENV, POLARS_ALLOCATOR_CONF)
    if MALLOC_ARENAS_ENV not in os.environ and limit_malloc_arenas(MALLOC_ARENAS):
        os.environ[MALLOC_ARENAS_ENV] = str(MALLOC_ARENAS)


#: ``mallopt``'s parameter for the most arenas (glibc's ``malloc.h``).
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int) -> bool:
    """Have the GNU C library's ``malloc`` use at most ``arenas`` arenas from now on
    (``mallopt(M_ARENA_MAX)``); False, and nothing done, on another C library."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt, gnu = libc.mallopt, libc.gnu_get_libc_version  # glibc's own functions
    except (OSError, AttributeError):  # musl and others: their malloc has no arenas to set
        return False
    del gnu
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
