"""Benchmark: stage-one extraction against a local OpenAI-compatible server.

The server (``tests/fake_openai.py``, a separate process) answers every request after a
fixed latency. With N sessions, latency L and concurrency C the ideal wall time is N x L / C;
this prints memkiln's time and its ratio to the ideal. Run from the repository root:

    python bench/extract.py [--rollouts 400] [--latency 0.2] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import asyncio  # noqa: E402

import duckdb  # noqa: E402

from memkiln.io.rules import load_rules  # noqa: E402
from memkiln.llm.requests import build_requests  # noqa: E402
from memkiln.pipeline.extract import extract_store  # noqa: E402
from memkiln.pipeline.ingest import ingest_archive  # noqa: E402
from memkiln.settings import Settings  # noqa: E402
from tests.builders import make_archive  # noqa: E402


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--latency", str(latency)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"fake server did not start: {line!r}")
    return proc, line.split()[1]


async def plain_client(url: str, requests: list[tuple[str, str]], concurrency: int) -> float:
    """The baseline: the same requests sent by a bare asyncio loop over the openai client
    (no selection, no rendering, no store), at the same concurrency."""
    import asyncio

    import openai

    from memkiln.transforms.stage_one_answer import stage_one_json_schema

    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, timeout=30)
    slots = asyncio.Semaphore(concurrency)
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "stage_one_output",
            "schema": stage_one_json_schema(),
            "strict": True,
        },
    }

    async def one(system: str, user: str) -> None:
        async with slots:
            await client.chat.completions.create(
                model="fake-model",
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                extra_body={"response_format": fmt},
            )

    started = time.perf_counter()
    await asyncio.gather(*(one(s, u) for s, u in requests))
    elapsed = time.perf_counter() - started
    await client.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="memkiln-bench-extract-") as tmp:
        work = Path(tmp)
        make_archive(work / "archive", args.rollouts)
        base = Settings(
            archive=work / "archive",
            db=work / "m.duckdb",
            backfill=True,
            min_rollout_idle_hours=0,
            max_rollouts_per_run=args.rollouts,
        )
        ingest_archive(base)
        server, url = start_server(args.latency)
        try:
            settings = Settings(
                **(
                    base.model_dump()
                    | {
                        "backend": "openai",
                        "base_url": url,
                        "model": "fake-model",
                        "concurrency": args.concurrency,
                        "max_retries": 0,
                        "request_timeout_s": 30,
                    }
                )
            )
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            started, cpu_started = time.perf_counter(), time.process_time()
            summary = extract_store(settings)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            with duckdb.connect(str(settings.db)) as con:  # build_requests stores segments
                todo = con.sql("select rollout_id, updated_at from rollouts").pl()
                prepared = build_requests(con, todo, settings=settings, rules=load_rules())
            baseline = asyncio.run(
                plain_client(
                    url, [(r.prompt.system, r.prompt.user) for r in prepared], args.concurrency
                )
            )
            again_started = time.perf_counter()
            rerun = extract_store(settings)
            again = time.perf_counter() - again_started
        finally:
            server.terminate()
            server.wait(timeout=10)

    ideal = args.rollouts * args.latency / args.concurrency
    ok = summary.outcomes.get("succeeded", 0)
    cores = os.cpu_count()
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, {cores} cores")
    print(f"run started {at}, load average then {load} (1, 5, 15 min)")
    header = ("rollouts", "latency s", "conc", "ideal s", "memkiln s", "ratio", "req/s", "ok")
    print("{:>10} {:>10} {:>5} {:>8} {:>10} {:>6} {:>7} {:>5}".format(*header))
    print(
        f"{args.rollouts:>10} {args.latency:>10.3f} {args.concurrency:>5} {ideal:>8.2f} "
        f"{elapsed:>10.2f} {elapsed / ideal:>6.3f} {summary.requests / elapsed:>7.1f} {ok:>5}"
    )
    per_session = cpu / args.rollouts * 1000
    print(f"memkiln process CPU during the run: {cpu:.2f} s ({per_session:.1f} ms per session)")
    print(
        f"plain-client baseline (same requests, bare openai loop, same process): {baseline:.2f} s,"
        f" ratio to ideal {baseline / ideal:.3f}; memkiln / baseline = {elapsed / baseline:.3f}"
    )
    print(
        f"re-run over the unchanged store: {again:.2f} s, {rerun.requests} requests, "
        f"decisions {rerun.decisions}"
    )
    verdict = "within" if elapsed <= ideal * 1.15 else "NOT within"
    print(f"target: within 15% of the ideal -> {verdict} (ratio {elapsed / ideal:.3f})")


if __name__ == "__main__":
    main()
