"""memkiln's exceptions.

Every error a user can cause says what went wrong and what to do about it; the CLI turns
each into one line on stderr and an exit code.

    MemkilnError
    ├── ConfigError          a setting or an argument is wrong (missing archive, bad path)
    ├── StoreError           the DuckDB file cannot be opened, is locked, or is too new
    │   └── StoreLockedError another process holds the database file
    └── InputError           an input file cannot be read at all (not a per-line problem)

    Interrupted (a BaseException, like KeyboardInterrupt, so that no ``except Exception``
                 of a batch swallows it): SIGTERM or SIGINT arrived; the run record is
                 closed as ``interrupted``, exit code 128 + the signal number

Exit codes of the CLI: 0 all done; 1 some sessions or projects failed (the summary says
which); 2 a usage or configuration error (``MemkilnError``); 3 the database is held by
another run (``StoreLockedError``).

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


class Interrupted(BaseException):
    """The process was asked to stop (SIGTERM, SIGINT); raised in the main thread."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(signum, name)  # both in ``args``, so that it pickles
        self.signum = signum
        self.name = name

    def __str__(self) -> str:
        return f"interrupted by {self.name}"
