"""Prefect's temporary API server ends with the run that started it, even a killed one.

Without ``PREFECT_API_URL``, a run's first flow starts Prefect's ephemeral API server as a
child process (``uvicorn`` serving ``prefect.server.api.server:create_app``) and stops it
when Python shuts down. A run killed with SIGKILL (a scheduler's hard stop, the OOM killer)
never shuts down: the server lived on with no parent, holding its port and the caller's
output pipe, for good. Here the server is started through ``watched_app`` instead, which
runs Prefect's own app and ends the server process as soon as its parent is gone.

The server also runs in a session of its own: a signal to the run's process group (a
terminal's Ctrl-C, systemd or cron stopping a job) reaches the run alone, which stops and
closes its records through the server, and then the server. Sent to both, the server ended
first and the run spent about three minutes retrying it, printing Prefect's errors.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import types
from typing import Any

#: Prefect's uvicorn factory for the temporary server, and the one that watches its parent.
PREFECT_APP = "prefect.server.api.server:create_app"
WATCHED_APP = "memkiln.flows.server_watch:watched_app"
#: The run's process id, handed to the server in its environment.
PARENT_ENV = "MEMKILN_SERVER_PARENT"
#: Seconds between two looks at the parent.
WATCH_INTERVAL = 1.0


def watch_ephemeral_server() -> None:
    """From now on, a temporary API server this process starts ends when this process does.
    Prefect's own start-up is kept (its arguments, its environment); only the app it serves
    is wrapped. Does nothing if Prefect's server module has changed shape."""
    import prefect.server.api.server as server

    cls: Any = getattr(server, "SubprocessASGIServer", None)
    start = getattr(cls, "_run_uvicorn_command", None)
    if start is None or getattr(start, "memkiln_watched", False):
        return

    def run_uvicorn_command(self: Any) -> subprocess.Popen[Any]:
        real = subprocess.Popen

        def popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
            args = [WATCHED_APP if a == PREFECT_APP else a for a in args]
            kwargs["env"] = {**(kwargs.get("env") or os.environ), PARENT_ENV: str(os.getpid())}
            kwargs["start_new_session"] = True  # the run's group's signals are the run's
            return real(args, **kwargs)

        # the module's own name for subprocess, for the length of this one call
        server.subprocess = types.SimpleNamespace(**{**vars(subprocess), "Popen": popen})  # type: ignore[attr-defined,assignment]  # Prefect's module-level import
        try:
            return start(self)  # type: ignore[no-any-return]
        finally:
            server.subprocess = subprocess  # type: ignore[attr-defined]

    run_uvicorn_command.memkiln_watched = True  # type: ignore[attr-defined]
    cls._run_uvicorn_command = run_uvicorn_command


def watched_app() -> Any:
    """The uvicorn factory of the temporary server: Prefect's app, in a process that exits
    once the run that started it is gone."""
    parent = int(os.environ.get(PARENT_ENV) or 0)
    if parent:
        threading.Thread(
            target=_exit_when_orphaned, args=(parent,), name="memkiln-parent-watch", daemon=True
        ).start()
    from prefect.server.api.server import create_app

    return create_app()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL)
    os._exit(0)  # the run is gone: nothing is left to serve
