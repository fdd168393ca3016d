"""Flow runs of ``memkiln serve`` started from a process that has memkiln imported already.

Prefect's runner starts each flow run of a served flow in a new ``spawn`` process
(``prefect.flow_engine.run_flow_in_subprocess``), which imports Prefect, Polars, DuckDB, the
openai client and memkiln again before the run begins: about 6 s of CPU per run, more than a
nightly run with nothing new costs. Under ``serve``, flow runs are started from a
``forkserver`` instead: its server process imports those modules once, when the first run
starts, and each flow run is a fork of it (a clean, single-threaded process that is not the
serving process), with the modules in place.

The runner code is Prefect's own; only the process start method changes. Prefect reads the
start method from ``multiprocessing.get_context`` in ``prefect.flow_engine``; if a Prefect
release stops doing that, ``forkserver_flow_runs`` leaves Prefect alone and says so
(``tests/flows/test_operations.py`` serves a real flow run either way).

One run at a time: the deployment gets Prefect's concurrency limit of one run with the
``CANCEL_NEW`` collision strategy (``one_run_at_a_time``), so a run that comes due while the
previous one still runs is cancelled by the server before it starts (Prefect's UI shows it
Cancelled, "Deployment concurrency limit reached."), where before it started, met the
store's lock and failed with a traceback. ``serve`` prints one line for each
(``report_skipped_runs``).

Stopping: ``serve_deployment`` runs Prefect's ``Runner`` (what ``Flow.serve`` runs), whose
SIGTERM handler cancels the runs in progress and stops the polling; it then reports which
signal stopped it, so that ``serve`` can print one line and exit 128 + the signal, and stops
the fork server at once (it would otherwise wait for its parent's end to notice).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.context
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memkiln.settings import Options, Settings

#: What the fork server imports once: the nightly flow and, through it, everything it uses.
PRELOAD = ["memkiln.flows.run"]

log = logging.getLogger("memkiln")


class _ForkserverContexts:
    """Stands in for the ``multiprocessing`` module inside ``prefect.flow_engine``: any
    context asked for is the fork server's; everything else is the real module's."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self._context = context

    def get_context(self, method: str | None = None) -> multiprocessing.context.BaseContext:
        return self._context

    def __getattr__(self, name: str) -> Any:
        return getattr(multiprocessing, name)


def forkserver_flow_runs() -> bool:
    """Make Prefect start this process's flow runs from a preloaded fork server; returns
    whether it could (False: Prefect's own ``spawn`` start is kept)."""
    import prefect.flow_engine as engine

    if getattr(engine, "multiprocessing", None) is not multiprocessing:
        log.warning("flow runs start with Prefect's default (spawn): its engine changed")
        return False
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    # a stand-in for the module Prefect imported (not re-exported, not a module): hence the ignore
    engine.multiprocessing = _ForkserverContexts(context)  # type: ignore[attr-defined,assignment]
    return True


def one_run_at_a_time() -> Any:
    """The deployment's concurrency limit: one run; a run that comes due while one runs is
    cancelled, not queued (a nightly run that overlaps the next one has nothing to add)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    return ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW)


#: The line ``serve`` prints for a run the server cancelled (``{}``: the flow run's id).
SKIPPED_LINE = (
    "memkiln serve: flow run {} skipped (Cancelled in Prefect): the previous run was still "
    "going; one run at a time"
)
#: The logger of Prefect's runner that reports a run the server would not let start.
_PROPOSER_LOGGER = "prefect.runner.state_proposer"


class _SkippedRuns(logging.Handler):
    """Prints ``SKIPPED_LINE`` for each run Prefect's runner did not start because the
    server cancelled it (its own report of that is an INFO record, not shown)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(level=logging.INFO)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if "non-pending state" not in str(record.msg) or "CANCELLED" not in map(str, args):
            return
        self.stream.write(SKIPPED_LINE.format(args[0] if args else "?") + "\n")
        self.stream.flush()


def report_skipped_runs(stream: Any = None) -> logging.Handler:
    """Print one line on ``stream`` (stderr) for each run cancelled by the concurrency limit;
    returns the handler (installed on Prefect's runner logger)."""
    import sys

    handler = _SkippedRuns(stream or sys.stderr)
    logger = logging.getLogger(_PROPOSER_LOGGER)
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def serve_deployment(
    flow: Any,
    *,
    name: str,
    cron: str,
    parameters: dict[str, Any],
    limit: Any,
    on_ready: Callable[[], None] = lambda: None,
) -> int | None:
    """Serve ``flow`` as the deployment ``name`` on ``cron`` until a signal stops it (calling
    ``on_ready`` once the deployment is registered); returns the signal's number (None when
    the runner ended by itself)."""
    import asyncio
    import signal

    from prefect.runner import Runner

    received: list[int] = []

    class _Runner(Runner):
        def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:
            received.append(signal.SIGTERM)
            super().handle_sigterm(*args, **kwargs)

    runner = _Runner(name=name, pause_on_shutdown=False)
    runner.add_flow(flow, name=name, cron=cron, parameters=parameters, concurrency_limit=limit)
    on_ready()
    try:
        asyncio.run(runner.start())
    except SystemExit:  # Prefect's handler exits when a signal comes before the runner started
        if not received:
            raise
    finally:
        stop_forkserver()
    return received[0] if received else None


def stop_forkserver() -> None:
    """Stop this process's fork server, if it started one (its flow runs have ended)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)
    if stop is not None and getattr(server, "_forkserver_pid", None) is not None:
        stop()


def check_cron(cron: str) -> None:
    """A ``ConfigError`` unless Prefect reads ``cron`` as a schedule."""
    from prefect.client.schemas.schedules import construct_schedule

    from memkiln.errors import ConfigError

    try:
        construct_schedule(cron=cron)
    except ValueError as exc:
        raise ConfigError(f"invalid --cron {cron!r}: {str(exc).splitlines()[0]}") from None


def check_prefect_server(url: str) -> None:
    """The Prefect server ``serve`` registers with answers its health check (Prefect's own
    client), else one line: a configuration error, not a traceback."""
    from prefect.client.orchestration import get_client

    from memkiln.errors import ConfigError
    from memkiln.io.rules import load_rules
    from memkiln.transforms.redact import redact_text

    with get_client(sync_client=True) as client:
        problem = client.api_healthcheck()
    if problem is not None:
        why = (str(problem).splitlines() or [""])[0]
        raise ConfigError(
            f"the Prefect server at PREFECT_API_URL={redact_text(url, rules=load_rules())} "
            f"cannot be reached ({type(problem).__name__}: {why}): "
            "start it ('prefect server start') or correct PREFECT_API_URL"
        )


def serve_nightly(settings: Settings, *, name: str, cron: str) -> int | None:
    """``memkiln serve`` once its settings are checked: the settings become the deployment's
    parameters, the cron is checked, the Prefect server reached, then the nightly flow is
    served on the configured task runner until a signal stops it; returns the signal's
    number (None when the runner ended by itself)."""
    import os

    from memkiln.errors import ConfigError
    from memkiln.flows.launch import on_task_runner, options_of, prefect_environment
    from memkiln.settings import AS_GIVEN

    options = options_of(settings)
    parameters = {"options": options.model_dump(mode="json", context=AS_GIVEN)}
    refuse_secrets_in_parameters(options, parameters["options"])
    if not os.environ.get("PREFECT_API_URL"):
        raise ConfigError(
            "serve needs a Prefect server: start one ('prefect server start') and set "
            "PREFECT_API_URL (e.g. http://127.0.0.1:4200/api); or call 'memkiln run' from cron"
        )
    check_cron(cron)
    prefect_environment()
    check_prefect_server(os.environ["PREFECT_API_URL"])
    from memkiln.flows.run import run_flow
    from memkiln.flows.run_logs import quiet_keepalive_tracebacks

    forkserver_flow_runs()
    report_skipped_runs()
    quiet_keepalive_tracebacks()
    served = on_task_runner(run_flow, settings)  # the configured task runner, as 'run' does
    return serve_deployment(
        served,
        name=name,
        cron=cron,
        parameters=parameters,
        limit=one_run_at_a_time(),  # a run due while one runs is cancelled
        on_ready=lambda: print(
            f"memkiln serve: deployment {served.name}/{name} runs on cron {cron!r} "
            "(one run at a time); waiting for runs; SIGTERM or Ctrl-C stops",
            flush=True,
        ),
    )


def refuse_secrets_in_parameters(options: Options, as_given: dict[str, Any]) -> None:
    """A deployment's parameters are stored in Prefect's database as they are (its flow runs
    need the real paths): refuse to serve when one of them holds what redaction would remove."""
    redacted = options.model_dump(mode="json")
    held = sorted(k for k, v in as_given.items() if redacted.get(k) != v)
    if held:
        from memkiln.errors import ConfigError

        raise ConfigError(
            f"serve would store {', '.join(held)} in Prefect's database, and "
            f"{'it holds' if len(held) == 1 else 'they hold'} what looks like a secret: "
            "move it out of the path or URL, or call 'memkiln run' from cron instead"
        )
