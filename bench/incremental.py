"""A nightly run with nothing new: 10,000 sessions already processed, no file changed.

What a scheduler pays every night when nobody worked: discovering the archive, deciding
that no session needs a model, that no project changed. Measured three ways, each with the
``memkiln`` console script and one config file (openai backend against the local fake
server, so that any model call would be counted):

1. ``memkiln run --no-prefect``: memkiln's own work (the run record's duration, and the
   whole process from exec to exit);
2. ``memkiln run``: the same with Prefect's ephemeral API server started by the run;
3. ``memkiln serve`` against a running ``prefect server``: flow runs triggered through the
   API and picked up by the long-lived serve process (no per-run server start); reported
   from Prefect's own timestamps (picked up -> ended, started -> ended).

    python bench/incremental.py                 # 10,000 sessions, 3 repeats
    python bench/incremental.py --sessions 2000 --repeat 1

The archive, the database and the first (full) run are kept in ``bench/work/incremental``
and reused when the session count matches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import duckdb  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402

from tests.fake_openai import FakeOpenAI  # noqa: E402

BIN = Path(sys.executable).parent
MEMKILN = str(BIN / "memkiln")
PREFECT = str(BIN / "prefect")


def write_archive(root: Path, sessions: int) -> None:
    """``sessions`` small Codex sessions over 50 projects, updated 1 to 9 days ago (inside
    the nightly window, long idle), each with a request, a command and an answer."""
    now = datetime.now(UTC)
    for i in range(sessions):
        at = now - timedelta(days=1, seconds=i * 60 * 8 * 24 * 60 // sessions)  # over 8 days
        rid = f"019b{i:04x}-0000-7000-8000-{i:012x}"
        project = f"/home/dev/project-{i % 50}"
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        lines = [
            {"timestamp": stamp, "type": "session_meta", "payload": {
                "id": rid, "timestamp": stamp, "cwd": project, "originator": "codex_cli_rs",
                "cli_version": "0.140.0", "source": "cli"}},
            {"timestamp": stamp, "type": "response_item", "payload": {
                "type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": f"Please fix the failing test {i}; "
                     "I prefer small commits."}]}},
            {"timestamp": stamp, "type": "response_item", "payload": {
                "type": "function_call", "name": "shell", "call_id": "c1",
                "arguments": json.dumps({"command": ["bash", "-lc", "pytest -q"]})}},
            {"timestamp": stamp, "type": "response_item", "payload": {
                "type": "function_call_output", "call_id": "c1", "output": "3 passed"}},
            {"timestamp": stamp, "type": "response_item", "payload": {
                "type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "Fixed: the fixture path was wrong."}]}},
        ]  # fmt: skip
        day = root / "sessions" / at.strftime("%Y/%m/%d")
        day.mkdir(parents=True, exist_ok=True)
        path = day / f"rollout-{at.strftime('%Y-%m-%dT%H-%M-%S')}-{rid}.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
        mtime = at.timestamp()
        os.utime(path, (mtime, mtime))


def memkiln(*args: str, env: dict[str, str]) -> tuple[float, float]:
    """Run the console script; return its wall time and its CPU time (user + system, the
    process and its children), which a busy machine inflates less than the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = subprocess.run([MEMKILN, *args], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"memkiln {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def last_run_seconds(db: Path) -> tuple[float, dict[str, int]]:
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(
            "select seconds, files_seen, files_skipped, sessions_considered, model_requests, "
            "projects, projects_skipped from v_runs where command = 'run' limit 1"
        ).fetchall()[0]
    names = ("files_seen", "files_skipped", "sessions_considered", "model_requests",
             "projects", "projects_skipped")  # fmt: skip
    return float(row[0]), dict(zip(names, row[1:], strict=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def serve_runs(
    env: dict[str, str], config: Path, repeat: int, work: Path
) -> list[dict[str, float]]:
    """Start a Prefect server and ``memkiln serve``; trigger ``repeat`` flow runs through the
    API one after another; return Prefect's timings of each."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/api"
    env = {**env, "PREFECT_API_URL": base, "PREFECT_HOME": str(work / "prefect-server"),
           "PREFECT_UI_ENABLED": "false"}  # fmt: skip
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    serve = None
    out = []
    try:
        t0 = time.perf_counter()
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        print(f"prefect server up in {time.perf_counter() - t0:.1f} s", flush=True)
        # a schedule far away: the runs measured here are triggered by hand
        serve = subprocess.Popen(
            [MEMKILN, "serve", "--cron", "0 3 1 1 *", "--config", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        watcher = psutil.Process(serve.pid)
        deployment = None
        while deployment is None:
            time.sleep(1)
            found = httpx.post(f"{base}/deployments/filter", json={}, timeout=30).json()
            deployment = found[0]["id"] if found else None
        for _ in range(repeat):
            cpu0 = watcher.cpu_times()
            created = httpx.post(
                f"{base}/deployments/{deployment}/create_flow_run", json={}, timeout=30
            ).json()
            while True:
                time.sleep(0.5)
                run = httpx.get(f"{base}/flow_runs/{created['id']}", timeout=30).json()
                if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED"):
                    break
            assert run["state_type"] == "COMPLETED", run
            time.sleep(1)  # the flow-run process is reaped
            cpu1 = watcher.cpu_times()
            spent = sum(cpu1[:4]) - sum(cpu0[:4])  # serve and its reaped flow-run processes
            states = httpx.get(
                f"{base}/flow_run_states/", params={"flow_run_id": created["id"]}, timeout=30
            ).json()
            pending = min(parse_ts(s["timestamp"]) for s in states if s["type"] == "PENDING")
            end = parse_ts(run["end_time"])
            out.append({
                "picked_up_to_end": (end - pending).total_seconds(),
                "start_to_end": (end - parse_ts(run["start_time"])).total_seconds(),
                "cpu": spent,
            })  # fmt: skip
            print(f"  served run: {out[-1]}", flush=True)
    finally:
        for proc in (serve, server):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--parts", default="own,ephemeral,serve", help="which measurements (comma-separated)"
    )
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "incremental")
    args = parser.parse_args()
    work = args.work.resolve() / f"s{args.sessions}"
    archive = work / "archive"
    if not (work / "archive.done").exists():
        print(f"writing {args.sessions:,} sessions ...", flush=True)
        write_archive(archive, args.sessions)
        (work / "archive.done").touch()
    with FakeOpenAI() as fake:
        config = work / "memkiln.toml"
        config.write_text(
            f'archive = "archive"\ndb = "m.duckdb"\nout = "memories"\nbackend = "openai"\n'
            f'base_url = "{fake.base_url}"\nmodel = "fake-model"\nconcurrency = 16\n'
            f"max_rollouts_per_run = {args.sessions * 2}\n"
            "progress = false\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
        env |= {"MEMKILN_CONFIG": str(config), "MEMKILN_HOME": str(work / "home"),
                "OPENAI_API_KEY": "", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "DO_NOT_TRACK": "1"}  # fmt: skip
        env.pop("PREFECT_API_URL", None)
        if not (work / "processed.done").exists():
            print("first run: ingest, extract and consolidate everything ...", flush=True)
            elapsed, cpu = memkiln("run", "--no-prefect", env=env)
            print(f"  {elapsed:.1f} s, {fake.count():,} model requests", flush=True)
            (work / "processed.done").touch()
        load = os.getloadavg()[0]
        keys = ("own_record", "own_process", "own_cpu", "startup", "startup_cpu", "ephemeral",
                "ephemeral_cpu")  # fmt: skip
        results: dict[str, list[float]] = {key: [] for key in keys}
        before = fake.count()
        parts = set(args.parts.split(","))
        counts: dict[str, int] = {}
        for _ in range(args.repeat if "own" in parts else 0):
            elapsed, cpu = memkiln("--version", env=env)  # the interpreter and the CLI
            results["startup"].append(elapsed)
            results["startup_cpu"].append(cpu)
            elapsed, cpu = memkiln("run", "--no-prefect", env=env)
            record, counts = last_run_seconds(work / "m.duckdb")
            results["own_record"].append(record)
            results["own_process"].append(elapsed)
            results["own_cpu"].append(cpu)
            print(f"  --no-prefect: record {record:.2f} s, process {elapsed:.2f} s wall, "
                  f"{cpu:.2f} s CPU, {counts}", flush=True)  # fmt: skip
        for _ in range(args.repeat if "ephemeral" in parts else 0):
            elapsed, cpu = memkiln("run", env=env)
            results["ephemeral"].append(elapsed)
            results["ephemeral_cpu"].append(cpu)
            print(f"  ephemeral Prefect: {elapsed:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        served = serve_runs(env, config, args.repeat, work) if "serve" in parts else []
        requests = fake.count() - before

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    report = {
        "sessions": args.sessions,
        "load_average_1m": load,
        "load_average_1m_end": os.getloadavg()[0],
        "model_requests_in_nightly_runs": requests,
        "no_prefect_record_s": median(results["own_record"]),
        "no_prefect_process_s": median(results["own_process"]),
        "no_prefect_process_cpu_s": median(results["own_cpu"]),
        "version_process_s": median(results["startup"]),
        "version_process_cpu_s": median(results["startup_cpu"]),
        "ephemeral_process_s": median(results["ephemeral"]),
        "ephemeral_process_cpu_s": median(results["ephemeral_cpu"]),
        "serve_picked_up_to_end_s": median([r["picked_up_to_end"] for r in served]),
        "serve_start_to_end_s": median([r["start_to_end"] for r in served]),
        "serve_cpu_s": median([r["cpu"] for r in served]),
        "counts": counts,
        "all": results | {"serve": served},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
