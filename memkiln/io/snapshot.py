"""The readers' copy of the store: notebooks, ``status``, ``show`` read while a run writes.

DuckDB lets one process open a database file read-write, and then no other process can open
it at all, not even read-only; a process that holds it read-only stops a run from opening
it. So readers never open the store. The writer publishes a copy for them, ``<db>.snapshot``,
and every reader opens that copy read-only::

    writer (the one run)                          readers (any number, at any time)
    <db>  --checkpoint, copy-->  <db>.snapshot.tmp-PID  --rename-->  <db>.snapshot  <-- connect()

- A copy is published when a run record opens and closes (every phase of every command,
  whatever its end) and, at most every ``PUBLISH_MIN_SECONDS`` and at most ~1/10 of the
  time, at safe points inside a phase: after an ingest batch, after a batch of extraction
  outcomes, after a consolidated project.
- The copy is the store's bytes right after a ``CHECKPOINT`` (all committed data is in the
  file, the WAL is empty), copied while nothing of this process may commit (``Publisher``
  keeps the store's other users out for that moment). It is a reflink where the file
  system has them (btrfs, XFS), else a kernel copy.
- Only the holder of the run lock publishes (``memkiln.io.lock``), so any other temporary
  copy is a killed run's and is removed.
- It replaces the old copy with ``rename``, never by writing into it: a reader that has the
  old copy open keeps reading its own consistent file (the inode lives until it closes), so
  it cannot see a torn file, and nothing it holds is in the writer's way. The next
  ``connect()`` sees the new state.

The copy opens in DuckDB 1.4 and newer (the DuckDB CLI, DBeaver): a new store is written in
the storage format ``READERS_STORAGE_VERSION`` and copied as bytes; a store written before in
DuckDB 2's own format (which no 1.x reads, and which cannot be lowered in place) is copied
with ``COPY FROM DATABASE`` into a file of that format instead.

Trade-offs: readers see the state of the last publish (seconds old during a run), the copy
costs the store's size in disk space (more while an old copy is still held open), and each
publish reads the whole file (the interval grows with the time a copy takes).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import duckdb

from memkiln.constants import (
    PUBLISH_COPY_SHARE,
    PUBLISH_MIN_SECONDS,
    PUBLISH_WAIT_SECONDS,
    READERS_STORAGE_VERSION,
)
from memkiln.errors import StoreError, StoreLockedError
from memkiln.io.store import STORE_CATALOG, connect_file, copy_store, execute, open_store

#: ``ioctl`` request that makes a file share another's blocks (Linux ``FICLONE``).
_FICLONE = 0x40049409


def snapshot_path(db: Path) -> Path:
    """Where readers find the published copy of ``db``."""
    return db.with_name(db.name + ".snapshot")


def store_file(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The file behind a store connection (None for an in-memory store)."""
    rows = execute(con, "database_path", name=STORE_CATALOG).fetchall()
    return Path(rows[0][0]) if rows and rows[0][0] else None


def publish(con: duckdb.DuckDBPyConnection) -> float:
    """Publish the store's committed state for readers; returns the seconds it took (0 for an
    in-memory store). The caller makes sure nothing else commits on this store meanwhile."""
    db = store_file(con)
    if db is None:
        return 0.0
    started = time.monotonic()
    execute(con, "checkpoint_store")
    target = snapshot_path(db)
    temp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        # left by a killed run
        for stale in target.parent.glob(f"{glob.escape(target.name)}.tmp-*"):
            stale.unlink(missing_ok=True)
        if readable_by_duckdb1(con):
            _copy(db, temp)
        else:
            _export(con, temp)
        os.replace(temp, target)
    except (OSError, duckdb.Error) as exc:
        temp.unlink(missing_ok=True)
        reason = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0]
        raise StoreError(
            f"cannot write the readers' copy {target} ({reason}); free disk space or "
            "check the file system, then run again"
        ) from exc
    return time.monotonic() - started


def _version(tag: str) -> tuple[int, ...]:
    """``(1, 4, 0)`` of a storage version tag such as ``v1.4.0+``; ``()`` when unreadable."""
    parts = tag.strip().lstrip("v").rstrip("+").split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def readable_by_duckdb1(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store's file is in a storage format DuckDB 1.4+ opens (a store made by
    memkiln since the readers' copy has had to open there), so a byte copy of it will do."""
    rows = execute(con, "storage_version", name=STORE_CATALOG).fetchall()
    have = _version(rows[0][0]) if rows and rows[0][0] else ()
    return bool(have) and have <= _version(READERS_STORAGE_VERSION)


def _export(con: duckdb.DuckDBPyConnection, dest: Path) -> None:
    """``dest`` made a new database in the readers' storage format holding everything of the
    store (tables, comments, views): for a store written in a format DuckDB 1.x cannot open
    (by DuckDB 2 before memkiln chose the format). Slower than a byte copy; ``Publisher``
    spaces publishes by what they cost."""
    dest.unlink(missing_ok=True)
    copy_store(con, dest, storage_version=READERS_STORAGE_VERSION)


#: What a file system or kernel answers when it cannot share blocks or copy in the kernel.
_CANNOT = (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.ENOSYS)


def _copy(source: Path, dest: Path) -> None:
    """``dest`` made a copy of ``source``: shared blocks where the file system can, else a copy
    made by the kernel (``copy_file_range``: the bytes never pass through this process), else
    a plain read and write."""
    with open(source, "rb") as src, open(dest, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return
        except OSError as exc:
            if exc.errno not in _CANNOT:
                raise
        if _kernel_copy(src.fileno(), dst.fileno()):
            return
        shutil.copyfileobj(src, dst, length=8 * 1024 * 1024)


def _kernel_copy(src: int, dst: int) -> bool:
    """Copy the whole of ``src`` into the empty ``dst`` with ``copy_file_range``; False when
    the kernel cannot (nothing was copied then)."""
    if not hasattr(os, "copy_file_range"):  # Linux and FreeBSD only
        return False
    size = os.fstat(src).st_size
    done = 0
    while done < size:
        try:
            n = os.copy_file_range(src, dst, size - done)
        except OSError as exc:
            if done == 0 and exc.errno in _CANNOT:
                return False
            raise
        if n == 0:  # the file ended early: nothing more to copy
            break
        done += n
    return True


class Publisher:
    """Publishes a phase's progress at safe points, no more often than its cost allows.

    Threads that use the store beside the phase's own thread (extraction prepares requests
    and writes outcomes in workers) do so inside ``using()``; a copy waits for them and they
    wait for it, so no commit (and no checkpoint) lands in the file while it is copied.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._cond = threading.Condition()
        self._users = 0
        self._copying = False
        self._last = time.monotonic()
        self._cost = 0.0

    @contextmanager
    def using(self) -> Iterator[None]:
        """Use the store beside other threads (never while a copy is made)."""
        with self._cond:
            while self._copying:
                self._cond.wait()
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()

    def due(self) -> bool:
        interval = max(PUBLISH_MIN_SECONDS, self._cost / PUBLISH_COPY_SHARE)
        return time.monotonic() - self._last >= interval

    def maybe(self) -> bool:
        """Publish if the last copy is old enough and no other thread is using the store
        right now (else a later safe point will). Returns whether it published."""
        if not self.due():
            return False
        with self._cond:
            if self._copying or self._users:
                return False
            self._copying = True
        try:
            self._cost = publish(self.con)
            self._last = time.monotonic()
        finally:
            with self._cond:
                self._copying = False
                self._cond.notify_all()
        return True


def connect(db: Path | str) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the latest published state of the store ``db``, views
    included (``memkiln.connect`` finds the configured database). It never blocks a run and
    a run never breaks it; it keeps seeing the state it opened (call again for a newer one).

    A store that has never been published (written by an older memkiln) is published here
    first, when no run holds it; when a run holds it, this waits up to
    ``PUBLISH_WAIT_SECONDS`` for the run's first publish."""
    path = _database(db)
    target = snapshot_path(path)
    if not target.exists():
        _first_publish(path, target)
    try:
        return connect_file(target, read_only=True)
    except duckdb.Error as exc:
        raise StoreError(f"cannot open {target}: {str(exc).splitlines()[0]}") from exc


def _database(db: Path | str) -> Path:
    path = Path(db).expanduser()
    if not path.exists() and not snapshot_path(path).exists():
        raise StoreError(f"no database at {path}; run 'memkiln ingest' or 'memkiln run' first")
    return path


def _first_publish(db: Path, target: Path) -> None:
    from memkiln.io.lock import hold_store

    deadline = time.monotonic() + PUBLISH_WAIT_SECONDS
    while not target.exists():
        with ExitStack() as held:
            try:
                held.enter_context(hold_store(db))
            except StoreLockedError:  # a run is starting: it publishes once it holds the file
                if time.monotonic() > deadline:
                    raise StoreLockedError(
                        f"{db} is held by a run that has not published its state for readers "
                        "yet; try again in a moment"
                    ) from None
                time.sleep(0.2)
                continue
            if not target.exists():
                con = open_store(db)
                try:
                    publish(con)
                finally:
                    con.close()
