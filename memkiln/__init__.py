"""memkiln: per-project memory files from archives of coding-agent sessions.

For notebooks: ``memkiln.connect()`` opens the latest published state of the store read-only
(views included); it never blocks a run and a run never breaks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

__all__ = ["connect"]


def connect(db: Path | str | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to the latest consistent state of the store ``db``
    (the configured database when None: ``--db`` is not there, so ``MEMKILN_DB``, the
    config file, or ``data/memkiln.duckdb``).

    It reads the copy that runs publish (``<db>.snapshot``), so it can be opened during a
    run and held open as long as you like; it keeps the state it opened with, so call
    ``connect()`` again to see newer runs."""
    from memkiln.io.snapshot import connect as connect_snapshot

    if db is None:
        from memkiln.settings import load_settings

        db = load_settings({})[0].db
    return connect_snapshot(db)
