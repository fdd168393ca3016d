"""What a flow run logs to Prefect: each phase's counts as it ends, and no line per task
that completed (Prefect logs ``Finished in state Completed()`` for every task run, about two
thirds of a nightly run's log; a task that fails is still logged, with its error).

And what ``serve`` prints of a websocket to Prefect's API whose keep-alive ping failed (a
server restart, a suspended laptop): one line, not the library's traceback; the client
reconnects by itself."""

from __future__ import annotations

import logging

from memkiln.transforms.report import Section

#: Prefect's logger of task runs (``prefect.logging.loggers.task_run_logger``).
TASK_RUNS_LOGGER = "prefect.task_runs"


class _DropCompleted(logging.Filter):
    """Drops the record Prefect logs for a task run that completed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Finished in state Completed")


def quiet_completed_tasks() -> None:
    """Keep a completed task run's line out of the flow run's log (once per process)."""
    logger = logging.getLogger(TASK_RUNS_LOGGER)
    if not any(isinstance(f, _DropCompleted) for f in logger.filters):
        logger.addFilter(_DropCompleted())


def phase_line(section: Section) -> str:
    """A phase's counts on one line: ``memkiln ingest: files seen 8, new 8, …``."""
    title, rows = section
    return f"{title}: " + ", ".join(f"{what.strip()} {value}" for what, value in rows)


def log_phase(section: Section) -> None:
    """Log a phase's counts to the flow run's log as the phase ends."""
    from prefect import get_run_logger

    get_run_logger().info(phase_line(section))


#: The loggers of the ``websockets`` library's connections (Prefect's events and logs).
WEBSOCKET_LOGGERS = ("websockets.client", "websockets.server")
#: What a failed keep-alive ping is logged as, without its traceback.
KEEPALIVE_LINE = "websocket keep-alive ping to Prefect's API failed; the client reconnects"


class _KeepaliveOneLine(logging.Filter):
    """Turns the library's ``keepalive ping failed`` record (with a traceback) into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "keepalive ping failed" in str(record.msg):
            reason = record.exc_info[1] if record.exc_info else None
            record.msg = KEEPALIVE_LINE + (f" ({reason})" if reason else "")
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_keepalive_tracebacks() -> None:
    """A failed websocket keep-alive is one line, not a traceback (once per process)."""
    for name in WEBSOCKET_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KeepaliveOneLine) for f in logger.filters):
            logger.addFilter(_KeepaliveOneLine())
