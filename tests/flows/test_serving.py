"""``memkiln serve`` starts flow runs from a preloaded fork server, not a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_served_flow_runs_start_from_the_preloaded_forkserver() -> None:
    # in a child interpreter: the patch changes Prefect's engine for the whole process
    code = (
        "import multiprocessing, prefect.flow_engine as e\n"
        "from memkiln.flows.serving import PRELOAD, forkserver_flow_runs\n"
        "assert e.multiprocessing.get_context('spawn').get_start_method() == 'spawn'\n"
        "assert forkserver_flow_runs()\n"
        "ctx = e.multiprocessing.get_context('spawn')\n"
        "assert ctx.get_start_method() == 'forkserver', ctx\n"
        "assert e.multiprocessing.context is multiprocessing.context\n"
        "print(PRELOAD)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "memkiln.flows.run" in done.stdout


def test_serve_runs_the_nightly_flow_on_the_configured_task_runner(
    sample_archive: Path, tmp_path: Path
) -> None:
    # `task_runner = "dask"` in the config file reaches the served flow, as it does a
    # `memkiln run`; Prefect's serve loop (serve_deployment) is replaced (in a child interpreter) by a print
    config = tmp_path / "memkiln.toml"
    config.write_text(
        f'archive = "{sample_archive}"\ndb = "{tmp_path / "m.duckdb"}"\n'
        f'out = "{tmp_path / "memories"}"\ntask_runner = "dask"\n'
    )
    code = (
        "import memkiln.flows.serving, sys\n"
        "def serve(self, **kw):\n"
        "    kinds = [c.__name__ for c in type(self.task_runner).__mro__]\n"
        "    kind = 'DaskTaskRunner' if 'DaskTaskRunner' in kinds else kinds[0]\n"
        "    print(kind, self.name, kw['name'], kw['cron'])\n"
        "memkiln.flows.serving.serve_deployment = serve\n"
        "import prefect.client.orchestration as o\n"  # no server here: its health check passes
        "o.SyncPrefectClient.api_healthcheck = lambda self: None\n"
        "from memkiln.cli import main\n"
        "sys.argv = ['memkiln', 'serve', '--cron', '0 4 * * *', '--config', sys.argv[1]]\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMKILN_", "PREFECT_"))} | {
        "PREFECT_API_URL": "http://127.0.0.1:9/api",
        "PREFECT_HOME": str(tmp_path / "ph"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "DaskTaskRunner",
        "memkiln-run",
        "nightly",
        "0",
        "4",
        "*",
        "*",
        "*",
    ]
