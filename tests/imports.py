"""Which modules a spawned process imported, from ``PYTHONPROFILEIMPORTTIME`` (the console
script cannot be given ``-X importtime``, but reads the environment variable)."""

from __future__ import annotations

#: Set in a spawned process's environment: it lists every import on its stderr.
LIST_IMPORTS = {"PYTHONPROFILEIMPORTTIME": "1"}

#: Heavy packages that only a run under Prefect, or on Dask, needs.
ORCHESTRATION = ("prefect", "dask", "distributed")


def imported(stderr: str) -> set[str]:
    """The modules named on the ``import time:`` lines of ``stderr``."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def orchestration_imported(stderr: str) -> list[str]:
    """The modules of ``ORCHESTRATION`` (top-level packages) that the process imported."""
    return sorted(n for n in imported(stderr) if n.split(".")[0] in ORCHESTRATION)
