"""Progress on a terminal (rich), silent elsewhere.

A phase's bar counts what the phase works through, in its own unit: ingest in bytes (a
download-style column: ``12.3/98.1 MB 41 MB/s``), extraction in sessions, consolidation in
projects (``8/58 sessions 1.9 sessions/s``; a rate below one a second reads per minute),
with the time spent and an estimate of the time left.

Before the first bar, ``Reporter.waiting`` says what the process is doing (opening the store,
starting Prefect's API server) on one line that the next line or bar replaces, so a person
sees something from the first second; it is a process-wide status, ended by whichever bar
starts next (``rich`` shows one live display at a time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.status import Status
from rich.text import Text

#: The unit a bar counts in bytes (shown as kB, MB, … with a transfer rate).
BYTES = "bytes"


def rate_text(per_second: float | None, unit: str) -> str:
    """A rate in ``unit`` for a person: ``4.2 sessions/s``, ``36 projects/min`` below one a
    second, ``– sessions/s`` before there is one."""
    if per_second is None:
        return f"– {unit}/s"
    per, value = ("s", per_second) if per_second >= 1 else ("min", per_second * 60)
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{shown} {unit}/{per}"


class RateColumn(ProgressColumn):
    """The task's speed in its own unit (rich's speed column assumes bytes)."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        super().__init__()

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(rate_text(speed, self.unit), style="progress.data.speed")


def columns(unit: str) -> tuple[ProgressColumn, ...]:
    """A bar's columns for counting ``unit``."""
    if unit == BYTES:
        counted: tuple[ProgressColumn, ...] = (DownloadColumn(), TransferSpeedColumn())
    else:
        counted = (MofNCompleteColumn(), TextColumn(unit), RateColumn(unit))
    return (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        *counted,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )


class Reporter:
    """Shows progress on stderr when enabled and attached to a terminal."""

    #: The process's waiting line, if one is shown (one live display at a time).
    _status: ClassVar[Status | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, enabled: bool, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal

    def waiting(self, text: str) -> None:
        """Say what the process is doing until the next ``waiting`` line or bar."""
        if not self.enabled:
            return
        with Reporter._lock:
            if Reporter._status is None:
                Reporter._status = Status(text, console=self.console)
                Reporter._status.start()
            else:
                Reporter._status.update(text)

    @classmethod
    def done_waiting(cls) -> None:
        """End the waiting line, if one is shown."""
        with cls._lock:
            if cls._status is not None:
                cls._status.stop()
                cls._status = None

    @contextmanager
    def task(self, description: str, *, total: int, unit: str) -> Iterator[Callable[[int], None]]:
        """A bar for ``total`` ``unit`` (``BYTES``, ``"sessions"``, ``"projects"``, …);
        yields the function that advances it."""
        if not self.enabled or total <= 0:
            yield lambda _n: None
            return
        Reporter.done_waiting()
        with Progress(*columns(unit), console=self.console, transient=False) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n: progress.advance(task_id, n)
