"""``memkiln serve`` starts flow runs from a preloaded fork server, not a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


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
