"""Stopping on request: SIGTERM (what a scheduler sends) and SIGINT (Ctrl-C).

Inside ``interruptible()``, the first signal raises ``Interrupted`` in the main thread, so
the run unwinds normally: the run record is closed as ``interrupted``, leases are handed
back, the database is closed. If the process is still alive ``grace_seconds()`` later, or a
second signal arrives, ``on_hard_exit`` stops what the process started and it exits at once.
"""

from __future__ import annotations

import _thread
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from memkiln.errors import Interrupted

#: Seconds a run may take to unwind after a signal before the process exits regardless
#: (unwinding waits for the batch being prepared: about a second on an idle machine, 19 s
#: was measured at a load average of 18 on 2 cores).
GRACE_SECONDS = 30.0
#: ... times the load per core, up to this factor: at a load average of 34 to 42 on 2 cores
#: a local Dask run's unwinding took longer than 30 s (issue 29).
GRACE_LOAD_FACTOR_MAX = 4.0


def grace_seconds() -> float:
    """How long a stopped run may unwind: ``GRACE_SECONDS``, longer on a loaded machine (the
    run gets a smaller share of the CPU), at most ``GRACE_LOAD_FACTOR_MAX`` times."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this system
        per_core = 1.0
    return GRACE_SECONDS * min(max(per_core, 1.0), GRACE_LOAD_FACTOR_MAX)


HANDLED = (signal.SIGTERM, signal.SIGINT)

_received: list[int] = []  # signals received by this process (the first one counts)
_hard_exit_hooks: list[Callable[[], None]] = []


def _hard_exit(code: int, message: str | None = None) -> None:
    """Stop what this process started, then exit now, skipping Python's shutdown."""
    if message:
        sys.stderr.write(message + "\n")
    try:
        for hook in _hard_exit_hooks:
            hook()
    finally:
        sys.stderr.flush()
        os._exit(code)


#: Seconds before a stop that arrived where Python would drop its exception is delivered
#: again (``_dropped_here``).
REDELIVER_SECONDS = 0.05

_deferred: list[int] = []  # a stop put off by the handler, delivered again by a timer


def _handler(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _received and not _deferred:  # a second signal: no more waiting
        _hard_exit(
            128 + signum, f"error: {name} again: exiting now; the next run closes the records"
        )
    if not _received:
        _received.append(signum)
        _quiet_prefect()
        grace = grace_seconds()
        late = f"error: interrupted by {name}: not stopped after {grace:.0f} s, "
        late += "exiting now; the next run closes the run records"
        timer = threading.Timer(grace, _hard_exit, args=(128 + signum, late))
        timer.daemon = True
        timer.start()
    _deferred.clear()
    if _dropped_here(frame):
        # raised here, the stop would be printed as "Exception ignored in" and lost (a Dask
        # garbage collector callback of the local cluster, under load): deliver it again
        _deferred.append(signum)
        again = threading.Timer(REDELIVER_SECONDS, _thread.interrupt_main, args=(signum,))
        again.daemon = True
        again.start()
        return
    raise Interrupted(signum, name)


def _dropped_here(frame: FrameType | None) -> bool:
    """Whether Python would print and drop an exception raised in ``frame``: it runs inside a
    garbage collector callback or a ``__del__`` method."""
    callbacks = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


#: Prefect's loggers that report a task or flow run ending in an exception, with its
#: traceback: after a stop request that exception is the stop itself, and the CLI says so in
#: one line.
PREFECT_RUN_LOGGERS = (
    "prefect",
    "prefect.flow_runs",
    "prefect.task_runs",
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.engine",
)


def _quiet_prefect() -> None:
    for name in PREFECT_RUN_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextmanager
def interruptible(on_hard_exit: Callable[[], None] | None = None) -> Iterator[None]:
    """Turn SIGTERM and SIGINT into ``Interrupted`` while the block runs (in the main
    thread; elsewhere nothing changes). Blocks nest: an inner block re-installs the handler
    when something in between (Prefect's flow engine does, for SIGTERM) replaced it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if on_hard_exit is not None:
        _hard_exit_hooks.append(on_hard_exit)
    previous = {sig: signal.signal(sig, _handler) for sig in HANDLED}
    try:
        yield
    except Exception as exc:
        if not _received:
            raise
        # the stop surfaced as another error (DuckDB answers a signal that arrives during a
        # query with its own "Query interrupted"): it is still the stop
        signum = _received[0]
        raise Interrupted(signum, signal.Signals(signum).name) from exc
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if on_hard_exit is not None:
            _hard_exit_hooks.remove(on_hard_exit)


def stop_request(exc: BaseException) -> str | None:
    """The signal's name when ``exc`` means the process was asked to stop, else ``None``.

    Inside a flow run Prefect installs its own SIGTERM handler, which raises its
    ``TerminationSignal`` (and then re-sends the signal to the handler above)."""
    if isinstance(exc, Interrupted):
        return exc.name
    if _received:  # whatever unwinds after a stop request is the stop (see interruptible)
        return signal.Signals(_received[0]).name
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    prefect_errors = sys.modules.get("prefect.exceptions")
    if prefect_errors is not None and isinstance(exc, prefect_errors.TerminationSignal):
        return signal.Signals(exc.signal).name
    return None


def exit_now(exc: Interrupted, message: str) -> None:
    """Print ``message`` and exit at once with the signal's code (see ``_hard_exit``)."""
    _hard_exit(128 + exc.signum, message)


#: What the process is doing before its first run record, if it says (``starting``).
_starting: list[str] = []


def starting(what: str) -> None:
    """Say what the process does before it records a run (``Prefect was starting``), for the
    line a stop in that moment prints."""
    _starting.append(what)


def exiting(code: int) -> None:
    """From now until the process exits, a SIGTERM or SIGINT ends it at once with one line
    that says the command had already ended, with ``code``: what runs then is the process's
    shutdown (Prefect's log and event workers flushed, its temporary server stopped), about
    half a second after a run's last line, and a scheduler's stop then killed the process
    without a word (exit 143 after "memory files: …"). The exit code is the signal's, as for
    any stop; nothing of the command's work is lost. Python's own finalization, after the
    shutdown hooks, puts the default handlers back: a stop in its last tenths of a second
    still ends the process without a line."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        _hard_exit(
            128 + signum,
            f"error: interrupted by {name} while exiting: the command had already ended "
            f"(exit {code}); nothing it did was lost",
        )

    for sig in HANDLED:
        signal.signal(sig, stop)


def stopped_line(exc: Interrupted) -> str:
    """The one line the CLI prints for a run stopped by a signal (before it recorded a run,
    for instance while Prefect's temporary server was starting, nothing was done)."""
    store = sys.modules.get("memkiln.io.store")
    if store is None or not store.runs_started():
        if _starting:
            return f"error: {exc} while {_starting[-1]}, before the run began: nothing was done"
        return f"error: {exc} before the run started: nothing was done"
    return f"error: {exc}: the run was stopped and its record closed as 'interrupted'"
