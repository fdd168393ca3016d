"""Prefect's ephemeral API server, as seen by a process that stops on a signal.

Without ``PREFECT_API_URL``, the first flow run of a process starts a temporary API server
as a child process, stopped when Python shuts down. A process that exits at once (see
``memkiln.io.signals``) must stop it itself; and when a scheduler signals the whole process
group, the server is gone before the flow engine has reported the crash, which it would
retry for a long time: the run exits at once instead, its own records already closed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from memkiln.errors import Interrupted
from memkiln.io.signals import exit_now, interruptible, stopped_line

#: Seconds to wait for the server to exit after a signal (a group signal reached it too).
SERVER_EXIT_WAIT = 1.0


def _servers() -> list[subprocess.Popen[bytes]]:
    module = sys.modules.get("prefect.server.api.server")
    if module is None:
        return []
    instances = module.SubprocessASGIServer._instances.values()
    return [s.server_process for s in list(instances) if s.server_process is not None]


def stop_ephemeral_server() -> None:
    """Kill the ephemeral API server this process started, if any."""
    for process in _servers():
        if process.poll() is None:
            process.kill()


def ephemeral_server_gone() -> bool:
    """Whether this process started an ephemeral API server that has exited (or exits
    within ``SERVER_EXIT_WAIT``)."""
    for process in _servers():
        try:
            process.wait(timeout=SERVER_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            continue
        return True
    return False


@contextmanager
def stoppable() -> Iterator[None]:
    """``interruptible()`` around a flow's body, which exits at once when the run was
    stopped and the ephemeral server is already gone."""
    try:
        with interruptible(on_hard_exit=stop_ephemeral_server):
            yield
    except Interrupted as exc:
        if ephemeral_server_gone():
            exit_now(exc, stopped_line(exc))
        raise
