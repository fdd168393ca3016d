"""``memkiln serve``: a run that comes due while the previous one still runs is cancelled by
Prefect's deployment concurrency limit (one run, ``CANCEL_NEW``) and shows as Cancelled with
one line, where it used to start, meet the store's lock and fail with a traceback."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import httpx
import psutil
import pytest

from memkiln.flows.serving import SKIPPED_LINE, one_run_at_a_time, report_skipped_runs
from tests.commands import EXIT_TIMEOUT, alive, clean_env, free_port, start
from tests.fake_openai import FakeOpenAI
from tests.flows.test_operations import api


def test_the_deployment_allows_one_run_and_cancels_a_new_one() -> None:
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy

    limit = one_run_at_a_time()
    assert limit.limit == 1
    assert limit.collision_strategy == ConcurrencyLimitStrategy.CANCEL_NEW


def test_a_run_the_server_cancelled_is_one_line_and_other_runner_records_are_not() -> None:
    out = StringIO()
    handler = report_skipped_runs(out)
    logger = logging.getLogger("prefect.runner.state_proposer")
    try:
        message = "Aborted submission of flow run '%s': Server returned a non-pending state %r"
        logger.info(message, "run-1", "CANCELLED")
        logger.info(message, "run-2", "RUNNING")
        logger.info("something else %s", "CANCELLED")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue() == SKIPPED_LINE.format("run-1") + "\n"


def _api(method: str, url: str, **kw: object) -> httpx.Response:
    """A call to the test's Prefect server, sent again on a 503 as Prefect's own client does
    (its SQLite database is busy for a moment on a loaded machine)."""
    for attempt in range(6):
        response = httpx.request(method, url, timeout=30, **kw)  # type: ignore[arg-type]
        if response.status_code != 503:
            break
        time.sleep(0.5 * 2**attempt)
    response.raise_for_status()
    return response


def _state(base: str, run_id: str) -> str:
    return str(_api("GET", f"{base}/flow_runs/{run_id}").json()["state_type"])


def _new_run(base: str, deployment_id: str) -> str:
    response = _api("POST", f"{base}/deployments/{deployment_id}/create_flow_run", json={})
    return str(response.json()["id"])


def _wait(what: str, ready: object, proc: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(1)


@pytest.mark.prefect_server
def test_a_run_due_while_one_runs_is_cancelled_with_one_line_and_sigterm_stops_serve_cleanly(
    sample_archive: Path, tmp_path: Path, prefect_home: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/api"
    env = clean_env(
        PREFECT_HOME=str(prefect_home),
        PREFECT_API_URL=base,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_UI_ENABLED="false",
        PREFECT_RUNNER_POLL_FREQUENCY="2",
    )
    # the first run waits on the model until the test is done with it
    fake = FakeOpenAI(latency=600.0).start()
    config = tmp_path / "memkiln.toml"
    config.write_text(
        f'archive = "{sample_archive}"\ndb = "m.duckdb"\nout = "memories"\nbackfill = true\n'
        f'backend = "openai"\nbase_url = "{fake.base_url}"\nmodel = "fake-model"\n'
    )
    prefect = str(Path(sys.executable).with_name("prefect"))
    server = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    serve = None
    out = err = ""
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        _wait("a healthy Prefect server", healthy, server, timeout=180)
        # a schedule that does not come due during the test: the runs are made by hand
        serve = start("serve", "--cron", "0 3 1 1 *", "--config", str(config), env=env)
        deployments: list[dict[str, object]] = []

        def deployed() -> bool:
            deployments[:] = api(base, "/deployments/filter", {})
            return bool(deployments)

        _wait("the deployment", deployed, serve)
        deployment_id = str(deployments[0]["id"])
        first = _new_run(base, deployment_id)
        _wait("the first run at the model", lambda: bool(fake.requests), serve)
        assert _state(base, first) == "RUNNING"
        second = _new_run(base, deployment_id)
        _wait("the second run ended", lambda: _state(base, second) != "SCHEDULED", serve)
        assert _state(base, second) == "CANCELLED"
        assert _state(base, first) == "RUNNING"  # the first run goes on
        time.sleep(1)  # the runner's line for the second run is written as it is refused
        # SIGTERM to serve alone, as systemd's stop sends it: one line, 143, nothing left
        family = psutil.Process(serve.pid).children(recursive=True)
        assert family, "serve started no process for its run"
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=EXIT_TIMEOUT)
        assert serve.returncode == 128 + signal.SIGTERM, err
        assert not alive(family), "a process of serve's is still alive"
        assert _state(base, first) == "CANCELLED"
    finally:
        for proc in (serve, server):
            if proc is not None and proc.poll() is None:
                family = psutil.Process(proc.pid).children(recursive=True)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.communicate(timeout=EXIT_TIMEOUT)
                finally:
                    for p in alive(family):
                        p.kill()
        fake.stop()
    lines = err.strip().splitlines()
    assert lines == [SKIPPED_LINE.format(second), lines[-1]], err  # nothing else
    assert lines[-1].startswith("error: interrupted by SIGTERM: serve stopped"), err
    assert "memkiln serve: deployment memkiln-run/nightly" in out
