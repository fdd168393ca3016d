"""Whether a ``memkiln run`` is worth starting Prefect's temporary API server for.

Without ``PREFECT_API_URL``, a process that runs a flow first starts a temporary Prefect
API server (a uvicorn child with its own SQLite database) and stops it at the end:
measured 20 s wall and 7 CPU-s on a loaded 2-core machine before anything runs, where a
whole nightly run with nothing new takes about 5 s without Prefect (``bench/startup.py``,
``bench/RESULTS.md``). So a run whose archive has no new or changed file runs the same
recipe without Prefect (``memkiln.pipeline.run.run_job`` on ``LocalRunner``): the same work,
the same records in the store, only no flow run in that temporary server's database. A run
against a running Prefect server (``PREFECT_API_URL``) always goes through Prefect: there
it costs about 2.6 s and shows in the UI.

Deciding wrongly costs nothing but that: the plain recipe does whatever there is to do
(sessions that became idle enough, answers of an OpenAI batch, a failed project retried).
"""

from __future__ import annotations

import os

from memkiln.settings import Settings

#: The note a run that went without Prefect prints after its summary.
WITHOUT_PREFECT = (
    "ran without Prefect: nothing new in the archive, and Prefect's temporary API server "
    "costs more than such a run (with PREFECT_API_URL set, every run goes through Prefect)"
)


def prefect_worth_starting(settings: Settings) -> bool:
    """False when Prefect would run on a temporary server and the archive has no new or
    changed file since the last ingest (the caller holds the store)."""
    if os.environ.get("PREFECT_API_URL") or settings.archive is None:
        return True
    from memkiln.io.store import open_store
    from memkiln.pipeline.ingest import check_archive, plan_archive

    con = open_store(settings.db)
    try:
        plan = plan_archive(con, check_archive(settings.archive))
    finally:
        con.close()
    return bool(plan.filter(plan["action"] != "unchanged").height)
