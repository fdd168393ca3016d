"""A flow run's log: each phase's counts on one line, no line per completed task run."""

from __future__ import annotations

import logging

import pytest

from memkiln.flows.run_logs import TASK_RUNS_LOGGER, phase_line, quiet_completed_tasks


def test_a_phase_line_holds_its_counts() -> None:
    section = ("memkiln ingest", [("files seen", "8"), ("  new", "8"), ("MB read", "0.5")])
    assert phase_line(section) == "memkiln ingest: files seen 8, new 8, MB read 0.5"


def test_a_completed_task_run_is_not_logged_and_a_failed_one_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger(TASK_RUNS_LOGGER)
    before = list(logger.filters)  # Prefect's own, once its logging is configured
    quiet_completed_tasks()
    quiet_completed_tasks()  # once is enough, twice does no harm
    try:
        with caplog.at_level(logging.INFO, logger=TASK_RUNS_LOGGER):
            logger.info("Finished in state Completed()")
            logger.error("Finished in state Failed('Task run encountered an exception')")
            logger.info("a line of the task's own")
        assert [r.getMessage() for r in caplog.records] == [
            "Finished in state Failed('Task run encountered an exception')",
            "a line of the task's own",
        ]
        assert len(logger.filters) == len(before) + 1
    finally:
        logger.filters[:] = before


def test_a_failed_websocket_keepalive_is_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from memkiln.flows.run_logs import KEEPALIVE_LINE, quiet_keepalive_tracebacks

    logger = logging.getLogger("websockets.client")
    quiet_keepalive_tracebacks()
    try:
        with caplog.at_level(logging.DEBUG, logger="websockets.client"):
            try:
                raise ConnectionError("sent 1011 (internal error) keepalive ping timeout")
            except ConnectionError:
                logger.error("keepalive ping failed", exc_info=True)
            logger.error("another error")
        first, second = caplog.records
        assert first.getMessage().startswith(KEEPALIVE_LINE)
        assert "keepalive ping timeout" in first.getMessage()
        assert first.exc_info is None and first.levelname == "WARNING"
        assert "Traceback" not in caplog.text
        assert second.getMessage() == "another error"
    finally:
        logger.filters.clear()
