"""Flow runs of ``memkiln serve`` started from a process that has memkiln imported already.

Prefect's runner starts each flow run of a served flow in a new ``spawn`` process
(``prefect.flow_engine.run_flow_in_subprocess``), which imports Prefect, Polars, DuckDB, the
openai client and memkiln again before the run begins: about 6 s of CPU per run, more than a
nightly run with nothing new costs. Under ``serve``, flow runs are started from a
``forkserver`` instead: its server process imports those modules once, when the first run
starts, and each flow run is a fork of it (a clean, single-threaded process that is not the
serving process), with the modules in place.

The runner code is Prefect's own; only the process start method changes. Prefect reads the
start method from ``multiprocessing.get_context`` in ``prefect.flow_engine``; if a Prefect
release stops doing that, ``forkserver_flow_runs`` leaves Prefect alone and says so
(``tests/flows/test_operations.py`` serves a real flow run either way).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.context
from typing import Any

#: What the fork server imports once: the nightly flow and, through it, everything it uses.
PRELOAD = ["memkiln.flows.run"]

log = logging.getLogger("memkiln")


class _ForkserverContexts:
    """Stands in for the ``multiprocessing`` module inside ``prefect.flow_engine``: any
    context asked for is the fork server's; everything else is the real module's."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self._context = context

    def get_context(self, method: str | None = None) -> multiprocessing.context.BaseContext:
        return self._context

    def __getattr__(self, name: str) -> Any:
        return getattr(multiprocessing, name)


def forkserver_flow_runs() -> bool:
    """Make Prefect start this process's flow runs from a preloaded fork server; returns
    whether it could (False: Prefect's own ``spawn`` start is kept)."""
    import prefect.flow_engine as engine

    if getattr(engine, "multiprocessing", None) is not multiprocessing:
        log.warning("flow runs start with Prefect's default (spawn): its engine changed")
        return False
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    # a stand-in for the module Prefect imported (not re-exported, not a module): hence the ignore
    engine.multiprocessing = _ForkserverContexts(context)  # type: ignore[attr-defined,assignment]
    return True
