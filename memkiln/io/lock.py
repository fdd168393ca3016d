"""The store's run lock: one memkiln run per database file at a time.

DuckDB lets one process hold a file, but a ``memkiln run`` opens and closes it between its
phases, and Prefect takes seconds to start: a second run started meanwhile would get in
between, or fail deep inside a flow. So a run takes an exclusive ``flock`` on
``<db>.lock`` before anything else, and holds it until it ends. The kernel releases it when
the process dies, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from memkiln.errors import StoreError, StoreLockedError

_held: dict[Path, int] = {}  # lock file -> how many holders in this process
_guard = threading.Lock()


def lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


@contextmanager
def hold_store(db: Path) -> Iterator[None]:
    """Hold ``db`` for this process; raise ``StoreLockedError`` at once if another process
    holds it. Re-entrant within a process (the CLI takes it before Prefect starts, the flow
    it runs takes it again)."""
    path = lock_path(Path(db)).resolve()
    with _guard:
        if path in _held:
            _held[path] += 1
            fd = None
        else:
            fd = _acquire(path)
            _held[path] = 1
    try:
        yield
    finally:
        with _guard:
            _held[path] -= 1
            if _held[path] == 0:
                del _held[path]
                if fd is not None:
                    os.close(fd)  # releases the flock


def _acquire(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot create the lock file {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        db = path.with_name(path.name.removesuffix(".lock"))
        raise StoreLockedError(
            f"{db} is held by another memkiln run ({holder}); this run did nothing"
        ) from None
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} since {stamp}\n".encode(), 0)
    return fd
