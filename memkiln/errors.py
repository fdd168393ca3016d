"""memkiln's exceptions.

Every error a user can cause says what went wrong and what to do about it; the CLI turns
each into one line on stderr and exit code 2.

    MemkilnError
    ├── ConfigError          a setting or an argument is wrong (missing archive, bad path)
    ├── StoreError           the DuckDB file cannot be opened, is locked, or is too new
    │   └── StoreLockedError another process holds the database file
    └── InputError           an input file cannot be read at all (not a per-line problem)

Per-line and per-file problems inside an archive are not exceptions: they become rows in
the ``quarantine`` table with a fixed reason string, and the run goes on.
"""

from __future__ import annotations


class MemkilnError(Exception):
    """Base class for errors memkiln reports to the user as one clear line."""


class ConfigError(MemkilnError):
    """A setting or command-line argument is unusable."""


class StoreError(MemkilnError):
    """The DuckDB store cannot be used."""


class StoreLockedError(StoreError):
    """Another process holds the DuckDB file (DuckDB allows one writer and no readers then)."""


class InputError(MemkilnError):
    """An input file cannot be read at all."""
