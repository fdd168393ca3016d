"""Progress bars on a terminal (rich), silent elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class Reporter:
    """Shows a byte-based progress bar on stderr when enabled and attached to a terminal."""

    def __init__(self, *, enabled: bool, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal

    @contextmanager
    def task(self, description: str, *, total: int) -> Iterator[Callable[[int], None]]:
        if not self.enabled or total <= 0:
            yield lambda _n: None
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task_id = progress.add_task(description, total=total)
            yield lambda n: progress.advance(task_id, n)
