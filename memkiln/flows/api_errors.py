"""Prefect's API out of reach when a flow starts, said in one line (a configuration error,
exit 2), not a traceback: the temporary API server that did not start, or did not answer
Prefect's version check (seen under heavy load), or the server named by ``PREFECT_API_URL``
that cannot be reached."""

from __future__ import annotations

import os

#: What Prefect's client raises when the API does not answer its version check.
UNREACHABLE = "Failed to reach API at "
#: What Prefect raises when its temporary API server does not start in time.
NOT_STARTED = "ephemeral Prefect API server"


def prefect_api_line(exc: RuntimeError) -> str | None:
    """The one line for ``exc`` when it says Prefect's API could not be reached, else None."""
    from memkiln.io.rules import load_rules
    from memkiln.transforms.redact import redact_text

    message = str(exc)
    if NOT_STARTED in message:
        limit = os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "?")
        return (
            f"Prefect's temporary API server did not start within {limit} s (a busy machine?); "
            "nothing was done: run again, raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, "
            "point PREFECT_API_URL at a running server, or use --no-prefect"
        )
    if not message.startswith(UNREACHABLE):
        return None
    cause = exc.__cause__
    why = f" ({type(cause).__name__})" if cause is not None else ""
    url = os.environ.get("PREFECT_API_URL")
    if url:
        return (
            f"the Prefect server at PREFECT_API_URL={redact_text(url, rules=load_rules())} "
            f"cannot be reached{why}: start it ('prefect server start'), correct "
            "PREFECT_API_URL, or use --no-prefect"
        )
    return (
        "Prefect's temporary API server started but did not answer its version check"
        f"{why} (a busy machine?): run again, raise "
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, point PREFECT_API_URL at a running "
        "server, or use --no-prefect"
    )
