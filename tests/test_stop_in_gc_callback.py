"""A stop (SIGTERM) that arrives while the main thread runs a garbage collector callback (the
local Dask cluster's, under load) still stops the run at once: raised there, Python would
print "Exception ignored in" and drop it, and the run went on until the 30 s grace timer."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import gc, os, signal, sys, time
from memkiln.errors import Interrupted
from memkiln.io.signals import interruptible

fired = []

def callback(phase, info):
    if phase == "start" and not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        total = sum(i for i in range(1000))  # the handler runs here, inside the callback

gc.callbacks.append(callback)
try:
    with interruptible():
        gc.collect()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.01)
        print("not stopped", flush=True)
        os._exit(1)
except Interrupted as exc:
    print("stopped:", exc, flush=True)
"""


def test_a_stop_that_arrives_in_a_garbage_collector_callback_still_stops_the_run() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "stopped: interrupted by SIGTERM", done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr


def test_a_loaded_machine_gives_a_stopped_run_longer_to_unwind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memkiln.io import signals

    monkeypatch.setattr(signals.os, "cpu_count", lambda: 2)
    for load, grace in ((0.5, 30.0), (2.0, 30.0), (3.0, 45.0), (8.0, 120.0), (40.0, 120.0)):
        monkeypatch.setattr(signals.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert signals.grace_seconds() == grace, load
