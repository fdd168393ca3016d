"""Readers during a run, as a user meets them: a notebook loop calling ``memkiln.connect``,
``memkiln status --json``, and a second process holding a connection open all along, while
``memkiln run`` (the console script) extracts against a model that takes 1 s per answer."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import memkiln
from tests.commands import MEMKILN

#: A second process that holds one connection open, querying it now and then, until its
#: stdin closes; it prints a line per answer.
HOLDER = """
import sys, threading, time, memkiln
con = memkiln.connect(sys.argv[1])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():
    print(con.execute("select count(*) from items").fetchone()[0], flush=True)
    time.sleep(0.3)
con.close()
"""


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    return base | {"OPENAI_API_KEY": "sk-test-not-a-real-key"}


def _read(db: Path) -> tuple[int, int, bool]:
    """What a notebook cell would ask: items, extracted sessions, is a run going on."""
    con = memkiln.connect(db)
    try:
        items = con.execute("select count(*) from items").fetchone()[0]  # type: ignore[index]
        outputs = con.execute("select count(*) from stage1_outputs").fetchone()[0]  # type: ignore[index]
        running = con.execute("select count(*) from runs where status = 'running'").fetchone()
    finally:
        con.close()
    return items, outputs, running[0] > 0  # type: ignore[index]


def test_readers_get_answers_during_a_run_and_a_held_connection_does_not_stop_it(
    sample_archive: Path, tmp_path: Path, fake_openai: Any
) -> None:
    db, out = tmp_path / "m.duckdb", tmp_path / "memories"
    # a first command publishes the state the holder opens; the run does the slow work
    first = subprocess.run(
        [MEMKILN, "ingest", "--archive", str(sample_archive), "--db", str(db), "--no-prefect",
         "--no-progress"],
        capture_output=True, text=True, timeout=300, env=_env(),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    fake_openai.latency = 1.0
    run = subprocess.Popen(
        [MEMKILN, "run", "--archive", str(sample_archive), "--db", str(db), "--out", str(out),
         "--backfill", "--no-prefect", "--no-progress", "--backend", "openai",
         "--base-url", fake_openai.base_url, "--concurrency", "1", "--max-retries", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    statuses: list[dict[str, Any]] = []
    run_seen = threading.Event()

    def ask_status() -> None:  # beside the reader loop, as a user in another terminal
        run_seen.wait(timeout=300)
        while run.poll() is None and len(statuses) < 3:
            result = subprocess.run(
                [MEMKILN, "status", "--json", "--db", str(db)],
                capture_output=True, text=True, timeout=120, env=_env(),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            if run.poll() is None:
                statuses.append(json.loads(result.stdout))

    asker = threading.Thread(target=ask_status)
    asker.start()
    answers: list[tuple[float, int, int]] = []
    try:
        while run.poll() is None:
            items, outputs, running = _read(db)
            if run.poll() is None:
                answers.append((time.monotonic(), items, outputs))
            if running:
                run_seen.set()
            time.sleep(0.2)
        _, stderr = run.communicate(timeout=300)
    finally:
        run_seen.set()
        if run.poll() is None:
            run.kill()
            run.wait()
        asker.join(timeout=300)
        held_out, held_err = holder.communicate(input="", timeout=60)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(answers)]
    print(
        f"reader answers during the run: {len(answers)}, outputs seen "
        f"{sorted({a[2] for a in answers})}, longest gap {max(gaps, default=0):.2f} s; "
        f"status answers {len(statuses)}; holder answers {len(held_out.split())}"
    )
    assert run.returncode == 0, stderr
    assert fake_openai.count() > 0
    assert len(answers) >= 3 and all(items > 0 for _, items, _ in answers)
    assert len({outputs for _, _, outputs in answers}) >= 2  # progress was published
    assert statuses and all(s["tables"]["items"] > 0 for s in statuses)
    # the run's own record, published as it started, is what a reader sees during the run
    assert any(s["runs"][0]["status"] == "running" for s in statuses), statuses
    assert holder.returncode == 0, held_err
    assert len(held_out.split()) >= 3
    # a new reader sees the run's result
    con = memkiln.connect(db)
    try:
        last = con.execute(
            "select status from runs where parent_run_id is null order by started_at desc limit 1"
        ).fetchone()
        extracted = con.execute("select count(*) from stage1_outputs").fetchone()[0]  # type: ignore[index]
    finally:
        con.close()
    assert last == ("succeeded",) and extracted > 0
