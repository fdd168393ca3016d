"""``memkiln serve`` stores its settings in Prefect's database as the deployment's parameters
(its flow runs need the real paths), so it refuses to serve a path or URL that holds a secret."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.commands import MEMKILN
from tests.conftest import SAMPLE_ARCHIVE

TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    env["MEMKILN_HOME"] = os.environ["MEMKILN_HOME"]
    env.pop("PREFECT_API_URL", None)  # the refusal comes before any server is needed
    return subprocess.run(
        [MEMKILN, "serve", "--db", str(tmp_path / "m.duckdb"), "--out", str(tmp_path / "out"),
         *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize("where", ["archive", "base-url"])
def test_serve_refuses_a_secret_in_a_path_or_url_and_prints_only_the_setting_name(
    tmp_path: Path, where: str
) -> None:
    archive = tmp_path / (f"token={TOKEN}" if where == "archive" else "plain") / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, archive)
    extra = ["--backend", "openai", "--base-url", f"https://{TOKEN}@llm.example/v1"]
    done = serve(tmp_path, "--archive", str(archive), *(extra if where == "base-url" else []))
    assert done.returncode == 2, done.stderr
    line, *rest = done.stderr.strip().splitlines()
    assert rest == [], done.stderr
    name = "archive" if where == "archive" else "base_url"
    assert line.startswith("error: serve would store") and name in line, line
    assert TOKEN not in done.stdout + done.stderr


def test_serve_without_a_secret_goes_on_to_ask_for_a_prefect_server(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(SAMPLE_ARCHIVE, archive)
    done = serve(tmp_path, "--archive", str(archive))
    assert done.returncode == 2, done.stderr
    assert "serve needs a Prefect server" in done.stderr
