"""The environment a memkiln process sets for itself before anything imports Prefect or
Polars (both read their settings when imported); a value already in the environment is kept.
"""

from __future__ import annotations

import contextlib
import os
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
    """Polars' allocator setting for a memkiln process (``POLARS_ALLOCATOR_CONF``), before
    anything imports Polars, whose allocator reads it once, when loaded; a value already in the
    environment is kept. Worker processes started later inherit it."""
    from memkiln.constants import POLARS_ALLOCATOR_CONF, POLARS_ALLOCATOR_ENV

    os.environ.setdefault(POLARS_ALLOCATOR_ENV, POLARS_ALLOCATOR_CONF)
