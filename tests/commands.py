"""Running memkiln as its users do, shared by the tests that do: the installed ``memkiln``
console script beside this interpreter, with the caller's ``MEMKILN_*`` variables left out
(``MEMKILN_HOME`` kept: the suite's own), started as a scheduler starts it, stopped with a
signal; and what its output and its run records must look like."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import psutil

MEMKILN = str(Path(sys.executable).with_name("memkiln"))

#: How long a stopped run may take to exit (it takes a few seconds; this is a hang guard).
EXIT_TIMEOUT = 60


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``MEMKILN_*`` settings (the suite's
    ``MEMKILN_HOME`` kept), plus ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    home = {"MEMKILN_HOME": os.environ["MEMKILN_HOME"]} if "MEMKILN_HOME" in os.environ else {}
    return {**base, **home, **extra}


def memkiln(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``memkiln ARGS`` to its end, with ``env`` over the clean environment."""
    return subprocess.run(
        [MEMKILN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(**(env or {})),
        cwd=cwd,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """A usage or configuration error as promised: exit 2, one line naming ``words``, no
    traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Error" not in result.stderr.split(":", 1)[0]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A ``memkiln`` process in its own process group, as a scheduler starts one."""
    return subprocess.Popen(
        [MEMKILN, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or clean_env(),
        start_new_session=True,
    )


def stop_when(
    proc: subprocess.Popen[str],
    ready: Callable[[psutil.Process], bool],
    *,
    group: bool,
    sig: signal.Signals = signal.SIGTERM,
) -> tuple[list[psutil.Process], str]:
    """Wait until ``ready``, then send ``sig`` to the process (or to its whole group, as
    systemd, cron's session end and a terminal's Ctrl-C do); return its children at that
    moment and its stderr."""
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    while not ready(me):
        assert proc.poll() is None, f"ended before the signal: {proc.communicate()}"
        assert time.monotonic() < deadline, "never reached the phase to interrupt"
        time.sleep(0.02)
    children = me.children(recursive=True)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=EXIT_TIMEOUT)  # a hang fails here
    return children, err


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running half a second from now."""
    time.sleep(0.5)
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def runs(db: Path) -> list[tuple[str, str]]:
    """``(command, status)`` of every run record, oldest first."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("select command, status from runs order by started_at").fetchall()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
