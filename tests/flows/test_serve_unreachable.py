"""``serve`` with a Prefect server that cannot be reached: one line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.builders import make_archive
from tests.commands import memkiln, one_line_error


def closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_with_an_unreachable_prefect_server_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    make_archive(tmp_path / "archive", 1)
    url = f"http://127.0.0.1:{closed_port()}/api"
    result = memkiln(
        "serve", "--archive", str(tmp_path / "archive"), "--db", str(tmp_path / "m.duckdb"),
        "--out", str(tmp_path / "out"),
        env={"PREFECT_API_URL": url, "PREFECT_HOME": str(tmp_path / "prefect-home")},
    )  # fmt: skip
    one_line_error(result, "cannot be reached", url)
