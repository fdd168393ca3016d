"""A Dask worker preload for tests (``DASK_DISTRIBUTED__WORKER__PRELOAD``): every task the
worker finishes is appended, as ``<worker pid> <task prefix>``, to the file named by
``RECORD_DASK_TASKS``. It shows which tasks ran on which worker process of a local
cluster that a ``memkiln`` run starts and stops itself."""

from __future__ import annotations

import os
from typing import Any

from dask.utils import key_split
from distributed.diagnostics.plugin import WorkerPlugin


class Recorder(WorkerPlugin):
    def __init__(self, path: str) -> None:
        self.path = path

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if start == "executing" and finish == "memory":
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()} {key_split(key)}\n")


async def dask_setup(worker: Any) -> None:
    await worker.plugin_add(Recorder(os.environ["RECORD_DASK_TASKS"]), name="recorder")
