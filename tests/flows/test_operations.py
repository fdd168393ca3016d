"""Running unattended, as a scheduler runs it: one run per database at a time, stopping on
SIGTERM with honest records and nothing left alive, records of dead runs closed by the next
run, and ``memkiln serve`` against a real Prefect server. Every run goes through the
installed ``memkiln`` console script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import httpx
import psutil
import pytest

from tests.builders import codex_lines, uid, write_rollout
from tests.commands import (
    EXIT_TIMEOUT,
    MEMKILN,
    alive,
    clean_env,
    free_port,
    runs,
    start,
    stop_when,
)
from tests.fake_openai import FakeOpenAI


def big_archive(path: Path, *, sessions: int = 20, kb: int = 1200) -> Path:
    """Sessions with long command outputs: enough bytes (24 MB) for an ingest of a few
    seconds, in few sessions (the reruns after a stop extract and consolidate them all)."""
    at = datetime.now(UTC) - timedelta(days=1)
    output = ("compiling module ok; " * 50 + "\n") * (kb * 1024 // 1050)
    for i in range(sessions):
        lines = codex_lines(uid(i), request=f"build part {i}", at=at, calls=[("make", output)])
        write_rollout(path, uid(i), lines, at + timedelta(minutes=i))
    return path


def reading_archive(archive: Path, db: Path | None = None) -> Callable[[psutil.Process], bool]:
    """Ready when the process holds an archive file open or, since each file is open only
    for a moment, when the store has grown by items (an empty store is about 1.3 MB)."""

    def stored_bytes() -> int:
        wal = db.with_name(db.name + ".wal") if db is not None else None
        return sum(f.stat().st_size for f in (db, wal) if f is not None and f.exists())

    def ready(p: psutil.Process) -> bool:
        if db is not None and stored_bytes() > 4 * 1024 * 1024:
            return True
        try:
            return any(str(archive) in f.path for f in p.open_files())
        except psutil.Error:
            return False

    return ready


def assert_stopped_cleanly(
    proc: subprocess.Popen[str],
    err: str,
    children: list[psutil.Process],
    sig: signal.Signals = signal.SIGTERM,
) -> None:
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1].startswith(f"error: interrupted by {sig.name}"), err
    assert "Traceback" not in err
    assert not alive(children), "a child of the stopped run is still alive"


@pytest.mark.prefect_server  # the store's lock is tested here, not Prefect's start-up
def test_two_runs_started_half_a_second_apart_one_finishes_the_other_exits_3(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    args = ("run", "--archive", str(sample_archive), "--db", str(db), "--out",
            str(tmp_path / "out"), "--backfill", "--no-progress")  # fmt: skip
    first = start(*args)
    time.sleep(0.5)
    second = start(*args)
    results = [(p.wait(timeout=600), *p.communicate()) for p in (first, second)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 3], results
    _, _, err = next(r for r in results if r[0] == 3)
    assert len(err.strip().splitlines()) == 1, err
    assert "held by another memkiln run" in err and "Traceback" not in err
    assert [r for r in runs(db) if r[0] == "run"] == [("run", "succeeded")]


def test_sigterm_to_the_process_group_during_ingest_closes_the_run_and_nothing_survives(
    tmp_path: Path,
) -> None:
    archive = big_archive(tmp_path / "archive")
    db = tmp_path / "m.duckdb"
    args = ("run", "--archive", str(archive), "--db", str(db), "--out", str(tmp_path / "out"),
            "--no-progress", "--batch-mb", "4")  # fmt: skip
    proc = start(*args)
    children, err = stop_when(proc, reading_archive(archive, db), group=True)
    assert_stopped_cleanly(proc, err, children)
    assert dict(runs(db)) == {"run": "interrupted", "ingest": "interrupted"}
    again = subprocess.run(
        [MEMKILN, *args, "--no-prefect"], capture_output=True, text=True, env=clean_env()
    )
    assert again.returncode == 0, again.stderr
    assert "running" not in {status for _, status in runs(db)}


def test_sigterm_during_extract_hands_back_its_leases_and_nothing_is_left_running(
    sample_archive: Path, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    with FakeOpenAI(latency=30.0) as fake:
        args = ("run", "--archive", str(sample_archive), "--db", str(db), "--out",
                str(tmp_path / "out"), "--backfill", "--no-progress", "--backend", "openai",
                "--base-url", fake.base_url, "--concurrency", "2")  # fmt: skip
        proc = start(*args)
        children, err = stop_when(proc, lambda _: fake.count() > 0, group=False)
    assert_stopped_cleanly(proc, err, children)
    assert dict(runs(db)) == {"run": "interrupted", "ingest": "succeeded", "extract": "interrupted"}
    with duckdb.connect(str(db), read_only=True) as con:
        held = con.execute("select count(*) from stage1_jobs where status = 'running'").fetchall()
    assert held == [(0,)]
    again = subprocess.run(
        [MEMKILN, *args[:8], "--no-prefect"], capture_output=True, text=True, env=clean_env()
    )
    assert again.returncode == 0, again.stderr
    assert "running" not in {status for _, status in runs(db)}


def test_ctrl_c_in_the_terminal_during_extract_stops_the_run_at_once_and_says_one_line(
    sample_archive: Path, tmp_path: Path
) -> None:
    # a terminal's Ctrl-C is SIGINT to the whole foreground group: Prefect's temporary API
    # server, a child of the run, got it too and ended first, and the run then spent about
    # three minutes retrying a server that was gone, printing Prefect's errors, before its line
    db = tmp_path / "m.duckdb"
    with FakeOpenAI(latency=30.0) as fake:
        args = ("run", "--archive", str(sample_archive), "--db", str(db), "--out",
                str(tmp_path / "out"), "--backfill", "--no-progress", "--backend", "openai",
                "--base-url", fake.base_url, "--concurrency", "2")  # fmt: skip
        proc = start(*args)
        children, err = stop_when(proc, lambda _: fake.count() > 0, group=True, sig=signal.SIGINT)
    assert_stopped_cleanly(proc, err, children, signal.SIGINT)
    assert len(err.strip().splitlines()) == 1, err
    assert dict(runs(db)) == {"run": "interrupted", "ingest": "succeeded", "extract": "interrupted"}


def test_a_run_left_running_by_a_killed_process_is_closed_by_the_next_run(
    tmp_path: Path,
) -> None:
    archive = big_archive(tmp_path / "archive")
    db = tmp_path / "m.duckdb"
    args = ("run", "--archive", str(archive), "--db", str(db), "--out", str(tmp_path / "out"),
            "--no-progress", "--no-prefect", "--batch-mb", "4")  # fmt: skip
    proc = start(*args)
    me = psutil.Process(proc.pid)
    while not reading_archive(archive, db)(me):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # no chance to close anything
    proc.communicate(timeout=EXIT_TIMEOUT)
    assert dict(runs(db)) == {"run": "running", "ingest": "running"}
    again = subprocess.run([MEMKILN, *args], capture_output=True, text=True, env=clean_env())
    assert again.returncode == 0, again.stderr
    statuses = runs(db)
    assert statuses[:2] == [("run", "abandoned"), ("ingest", "abandoned")]
    assert "running" not in {status for _, status in statuses}


def test_the_run_flow_takes_its_parameters_as_json_as_a_deployment_sends_them(
    tmp_path: Path,
) -> None:
    from memkiln.flows.run import run_flow
    from memkiln.settings import Options

    sent = {"options": {"archive": str(tmp_path), "db": str(tmp_path / "m.duckdb"),
                        "sources": ["cli", "exec"], "backfill": True}}  # fmt: skip
    validated = run_flow.validate_parameters(json.loads(json.dumps(sent)))
    assert validated["options"] == Options(
        archive=tmp_path, db=tmp_path / "m.duckdb", sources=["cli", "exec"], backfill=True
    )
    with pytest.raises(Exception, match="sources"):
        run_flow.validate_parameters({"options": {"sources": ["nope"]}})


def api(base: str, path: str, body: dict[str, object]) -> list[dict[str, object]]:
    response = httpx.post(f"{base}{path}", json=body, timeout=30)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


def test_serve_starts_the_scheduled_nightly_flow_whose_artifact_holds_the_summary(
    sample_archive: Path, tmp_path: Path, prefect_home: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/api"
    home = prefect_home
    env = clean_env(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=base,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_UI_ENABLED="false",
        PREFECT_LOGGING_LEVEL="INFO",  # memkiln's own default (the tests run quieter)
    )
    config = tmp_path / "memkiln.toml"
    config.write_text(
        f'archive = "{sample_archive}"\ndb = "state/m.duckdb"\nout = "memories"\nbackfill = true\n'
    )
    prefect = str(Path(sys.executable).with_name("prefect"))
    server = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    serve = None
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "no Prefect server"
            time.sleep(0.5)
        serve = start("serve", "--cron", "* * * * *", "--config", str(config), env=env)
        served_at = time.monotonic()
        done: list[dict[str, object]] = []
        while not done:
            assert serve.poll() is None, serve.communicate()
            assert time.monotonic() - served_at < 240, "no completed flow run"
            time.sleep(2)
            done = api(base, "/flow_runs/filter", {"flow_runs": {"state": {"type": {
                "any_": ["COMPLETED", "FAILED", "CRASHED"]}}}})  # fmt: skip
        flow_run = done[0]
        assert flow_run["state_type"] == "COMPLETED", flow_run
        artifacts = api(
            base, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}}
        )
        summary = [a for a in artifacts if a["key"] == "memkiln-summary"]
        assert summary and summary[0]["type"] == "markdown"
        text = str(summary[0]["data"])
        for phase in ("memkiln ingest", "memkiln extract", "memkiln consolidate"):
            assert f"## {phase}" in text
        assert "| rollouts written | 8 |" in text
        tasks = api(base, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run["id"]]}}})
        # the phases, each ingest batch's preparation and each project's files
        names = {str(t["name"]).split()[0] for t in tasks}
        assert names == {"ingest", "prepare", "extract", "consolidate", "render"}
        # the log holds each phase's counts as it ended, and no line per completed task (the
        # run's process sends its log in batches: it may arrive after the run's end)
        deadline = time.monotonic() + 60
        while True:
            body = {"logs": {"flow_run_id": {"any_": [flow_run["id"]]}}}
            logs = api(base, "/logs/filter", body)
            messages = [str(entry["message"]) for entry in logs]
            if any("memkiln consolidate:" in m for m in messages):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        for phase in ("memkiln ingest: files seen 8", "memkiln extract:", "memkiln consolidate:"):
            assert any(m.startswith(phase) for m in messages), (phase, messages)
        completed = [e for e in logs if e["task_run_id"] and "Completed" in str(e["message"])]
        assert not completed, completed
    finally:
        for proc in (serve, server):
            if proc is not None and proc.poll() is None:
                family = psutil.Process(proc.pid).children(recursive=True)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=EXIT_TIMEOUT)
                finally:
                    for p in alive(family):
                        p.kill()
    assert serve is not None and serve.returncode is not None
    # memkiln's records name the flow run; the phases share the run's id as their parent
    with duckdb.connect(str(tmp_path / "state" / "m.duckdb"), read_only=True) as con:
        rows = con.execute(
            "select command, parent_run_id, run_id from runs where flow_run_id = $id",
            {"id": flow_run["id"]},
        ).fetchall()
    by_command = {command: (parent, run_id) for command, parent, run_id in rows}
    assert set(by_command) == {"run", "ingest", "extract", "consolidate"}
    parent_id = by_command["run"][1]
    assert all(by_command[c][0] == parent_id for c in ("ingest", "extract", "consolidate"))


def _serves(process: psutil.Process) -> bool:
    """Whether ``process`` is Prefect's temporary API server (uvicorn)."""
    try:
        return "uvicorn" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def test_a_killed_run_leaves_no_prefect_server_behind(tmp_path: Path) -> None:
    # SIGKILL cannot be caught: Prefect's temporary API server, a child of the run, lived on
    # with no parent, holding the output pipe a cron job reads, until killed by hand
    archive = big_archive(tmp_path / "archive")
    db = tmp_path / "m.duckdb"
    proc = start("ingest", "--archive", str(archive), "--db", str(db), "--no-progress")
    me = psutil.Process(proc.pid)
    # killed as soon as the temporary server runs (the ingest goes on for seconds after; the
    # archive's files are each open for a moment only, and the store grows at a batch's end)
    while not any(_serves(c) for c in me.children(recursive=True)):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    children = me.children(recursive=True)
    proc.kill()  # the run alone, not its process group
    proc.communicate(timeout=EXIT_TIMEOUT)  # returns once nothing holds its output open
    deadline = time.monotonic() + EXIT_TIMEOUT
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = alive(children)
    for child in left:  # not to outlive the test when it fails
        child.kill()
    assert not left, "a child of the killed run is still alive"
