"""A run whose Prefect API cannot be reached when its flow starts says so in one line and
exits 2 (before: a traceback of Prefect's client, exit 1): the server named by
``PREFECT_API_URL`` down, or Prefect's temporary server not answering its version check (seen
once under a load average of 40)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from memkiln.flows.api_errors import prefect_api_line
from tests.builders import make_archive
from tests.commands import memkiln, one_line_error
from tests.flows.test_serve_unreachable import closed_port


@pytest.mark.parametrize("command", ["run", "ingest"])
def test_a_run_against_an_unreachable_prefect_server_is_one_line_and_exit_2(
    tmp_path: Path, command: str
) -> None:
    make_archive(tmp_path / "archive", 1)
    url = f"http://127.0.0.1:{closed_port()}/api"
    result = memkiln(
        command, "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        *(["--out", str(tmp_path / "out")] if command == "run" else []),
        env={"PREFECT_API_URL": url, "PREFECT_HOME": str(tmp_path / "prefect-home")},
    )  # fmt: skip
    one_line_error(result, "cannot be reached", url)


def test_the_temporary_server_not_answering_is_said_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    try:
        try:
            raise httpx.ReadTimeout("timed out")
        except httpx.ReadTimeout as cause:
            raise RuntimeError("Failed to reach API at http://127.0.0.1:8123/api/") from cause
    except RuntimeError as exc:
        line = prefect_api_line(exc)
    assert line is not None and "\n" not in line
    assert "temporary API server" in line and "(ReadTimeout)" in line
    assert "--no-prefect" in line
    assert prefect_api_line(RuntimeError("something else")) is None
