"""One Prefect API server per test process, for the tests where Prefect is incidental.

A ``memkiln`` command in Prefect mode (the default) without ``PREFECT_API_URL`` starts
Prefect's temporary API server for itself, which costs it about 9 s of CPU even on a migrated
database. Tests marked ``prefect_server`` (or using the ``prefect_api`` fixture) instead get
``PREFECT_API_URL`` pointing at one server shared by the whole test process: Prefect's own
app, started as Prefect starts its temporary server, in a process that ends with the test
process even when that is killed (``memkiln.io.server_watch``), and stopped at the end of the
session. The commands then run as a user's commands run against ``prefect server start``.

Tests about the temporary server itself (its start-up limit, that a stopped or killed run
leaves none behind, what reaches its database) do not take the mark: they keep the default.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from memkiln.flows.server_watch import PARENT_ENV, WATCHED_APP
from tests.commands import free_port

#: Seconds the shared server may take to answer its first health check (a loaded machine).
START_TIMEOUT_S = 120
#: What Prefect's temporary server runs with (``SubprocessASGIServer``): no UI, no services.
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


class PrefectServer:
    """Prefect's API app served by uvicorn on a free local port, with its own home."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.process: subprocess.Popen[bytes] | None = None
        self.api_url = ""

    def start(self) -> None:
        log = self.home / "server.log"
        for _ in range(3):  # another process may take the port between the look and the bind
            port = free_port()
            self.api_url = f"http://127.0.0.1:{port}/api"
            with open(log, "ab") as err:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "uvicorn", "--factory", WATCHED_APP,
                     "--host", "127.0.0.1", "--port", str(port), "--log-level", "error",
                     "--lifespan", "on"],
                    env={**os.environ, "PREFECT_HOME": str(self.home), **SERVER_ENV,
                         PARENT_ENV: str(os.getpid())},
                    stdout=subprocess.DEVNULL, stderr=err,
                )  # fmt: skip
            if self._healthy():
                return
            self.stop()
        raise RuntimeError(f"Prefect's API server did not start; see {log}")

    def _healthy(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.api_url}/health", timeout=5).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "prefect_server: the test's commands talk to the test process's shared Prefect API "
        "server (PREFECT_API_URL) instead of each starting a temporary one",
    )


@contextmanager
def prefect_api_server(home: Path) -> Iterator[str | None]:
    """The API URL of a Prefect server in ``home`` for the length of the block (stopped at
    its end). None, with a warning, when it cannot start: the commands then start Prefect's
    temporary server as usual."""
    server = PrefectServer(home)
    try:
        server.start()
    except RuntimeError as exc:
        warnings.warn(f"{exc}: Prefect-mode commands start their own server", stacklevel=1)
        yield None
        return
    try:
        yield server.api_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def prefect_server_url(_offline_prefect: None) -> Iterator[str | None]:
    """The URL of this test process's shared Prefect API server, started on first use, in
    the process's Prefect home (``PREFECT_HOME``, set up by ``tests.conftest``)."""
    with prefect_api_server(Path(os.environ["PREFECT_HOME"])) as url:
        yield url


@pytest.fixture
def prefect_api(prefect_server_url: str | None, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """``PREFECT_API_URL`` set to the shared server for this test (and every process it
    starts with the test's environment)."""
    if prefect_server_url is not None:
        monkeypatch.setenv("PREFECT_API_URL", prefect_server_url)
    return prefect_server_url


@pytest.fixture(autouse=True)
def _prefect_server_mark(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("prefect_server"):
        request.getfixturevalue("prefect_api")


def flow_run_state(api_url: str, flow_run_id: str) -> str:
    """The state type (``COMPLETED``, ``FAILED``…) of a flow run the server holds."""
    response = httpx.get(f"{api_url}/flow_runs/{flow_run_id}", timeout=30)
    response.raise_for_status()
    return str(response.json()["state_type"])
