"""Benchmark: stage-one extraction at the service's rate limit.

A local OpenAI-compatible server (``tests/fake_openai.py``, in this process, in its
rate-limited mode) admits at most a sixth of the run's tokens per sliding window (a
request's tokens: its input plus the most output it asks for, as providers count them) and
answers each request after a fixed latency. The same sessions are extracted twice, each into
a fresh store:

- ``fixed``: the old way: ``--concurrency`` requests in flight whatever the limit, each 429
  retried by the client alone (``--max-retries`` times, its own backoff honouring
  Retry-After), the limit headers unread;
- ``controller``: memkiln's pace (``memkiln.llm.ratelimit``): the headers read, the whole
  run paused on a 429, the refused request sent again.

Printed per mode: the wall time, the requests the server received and refused (429), 429s
per request, sessions failed, and the utilisation: tokens admitted / (limit x time /
window), the time running from the first admission to the last answer; and a stricter one
whose time runs from the first admission to the last plus a window (the windows the
admissions cover: a run that sends everything at once uses one window). Run from the
repository root:

    python bench/ratelimit.py [--rollouts 40] [--window 10] [--share 6] [--latency 1]

``--console none,thread,dask`` runs the acceptance instead, as a user runs it: the ``memkiln``
console script (``memkiln backfill --backend openai``, a temporary ``MEMKILN_HOME``) against
the local server, with Prefect off (``none``), on Prefect's thread runner or on a local Dask
cluster. A first run with no limit counts the tokens of the whole backfill as the server
counts them (every request: extraction and consolidation), the limit is a ``--share`` of
them; then, per runner, a fresh store is backfilled at that limit and the server's own log
gives what it admitted and refused.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import duckdb  # noqa: E402
import openai  # noqa: E402

from memkiln.io.rules import load_rules  # noqa: E402
from memkiln.llm import backends  # noqa: E402
from memkiln.llm.ratelimit import Pace, Seen, Ticket  # noqa: E402
from memkiln.llm.requests import build_requests, request_tokens  # noqa: E402
from memkiln.pipeline import extract_send  # noqa: E402
from memkiln.pipeline.extract import extract_store  # noqa: E402
from memkiln.pipeline.ingest import ingest_archive  # noqa: E402
from memkiln.settings import Settings  # noqa: E402
from memkiln.transforms.tokens import count_tokens  # noqa: E402
from tests.builders import make_archive  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402


class FixedPace(Pace):
    """The old way: ``--concurrency`` in flight, nothing learned, nothing sent again."""

    def wait(self, now: float, tokens: int, requests: int = 1) -> float:
        return 0.0

    def settle(self, ticket: Ticket, seen: Seen | None, *, started: datetime | None = None) -> bool:
        self.in_flight -= 1
        return False


@contextmanager
def fixed_concurrency() -> Any:
    """The old code's behaviour: a fixed pace, the client retrying every 429 itself."""
    with (
        mock.patch.object(extract_send, "Pace", FixedPace),
        mock.patch.object(backends.Client, "_should_retry", openai.OpenAI._should_retry),
    ):
        yield


def run_tokens(settings: Settings) -> int:
    """The tokens of every request the run sends, as the server counts them."""
    with duckdb.connect(str(settings.db)) as con:
        todo = con.sql("select rollout_id, updated_at from rollouts").pl()
        built = build_requests(con, todo, settings=settings, rules=load_rules(), chunked=True)
    total = 0
    for request in built:
        _, tokens_in, tokens_out = request_tokens(request, settings.max_output_tokens)
        total += tokens_in + tokens_out
    return total


def measure(mode: str, base: Settings, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    db = work / f"{mode}.duckdb"
    settings = base.model_copy(update={"db": db})
    ingest_archive(settings)
    limit = run_tokens(settings) // args.share
    with FakeOpenAI(latency=args.latency) as fake:
        fake.token_counter = count_tokens
        window = fake.limit(tokens=limit, window=args.window)
        run = settings.model_copy(
            update={
                "backend": "openai",
                "base_url": fake.base_url,
                "model": "fake-model",
                "concurrency": args.concurrency,
                "max_retries": args.max_retries,
                "request_timeout_s": 60,
            }
        )
        started = time.monotonic()
        if mode == "fixed":
            with fixed_concurrency():
                summary = extract_store(run)
        else:
            summary = extract_store(run)
        ended = time.monotonic()
        elapsed = ended - started
        received = fake.count("/chat/completions")
        admitted = window.log
    first, last = admitted[0][0], admitted[-1][0]
    tokens = sum(t for _, t in admitted)
    # over the run's time (its first request to its last answer), and over the windows the
    # admissions cover (the first to the last admission, plus a window)
    utilisation = tokens / (limit * (ended - first) / args.window)
    strict = tokens / (limit * (last - first + args.window) / args.window)
    failed = summary.sessions_failed
    return {
        "mode": mode,
        "limit": limit,
        "s": elapsed,
        "received": received,
        "refused": window.refused,
        "per_request": window.refused / received if received else 0.0,
        "failed": failed,
        "ok": summary.outcomes.get("succeeded", 0) + summary.outcomes.get("succeeded_no_output", 0),
        "utilisation": utilisation,
        "strict": strict,
    }


MEMKILN = str(Path(sys.executable).with_name("memkiln"))


def backfill(
    work: Path, name: str, fake: FakeOpenAI, args: argparse.Namespace, runner: str
) -> dict[str, Any]:
    """``memkiln backfill`` through the console script into a fresh home under ``work``."""
    home = work / name
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    env |= {"MEMKILN_HOME": str(home), "OPENAI_API_KEY": "sk-local"}
    command = [
        MEMKILN, "backfill", "--archive", str(work / "archive"), "--db", str(home / "m.duckdb"),
        "--out", str(home / "memories"), "--backend", "openai", "--base-url", fake.base_url,
        "--model", "gpt-4.1-mini", "--min-idle-hours", "0", "--concurrency",
        str(args.concurrency), "--no-progress", "--json",
    ]  # fmt: skip
    if runner == "none":
        command.append("--no-prefect")
    else:
        command += ["--prefect", "--task-runner", runner]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    ended = time.monotonic()
    if done.returncode not in (0, 1):
        raise SystemExit(f"memkiln backfill exited {done.returncode}: {done.stderr[-2000:]}")
    counters = json.loads(done.stdout)
    return {"started": started, "ended": ended, "counters": counters}


def console(args: argparse.Namespace) -> None:
    """The acceptance as a user runs it (see the module's docstring)."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    rows = []
    with tempfile.TemporaryDirectory(prefix="memkiln-bench-ratelimit-", dir=args.tmp) as tmp:
        work = Path(tmp)
        make_archive(work / "archive", args.rollouts)
        with FakeOpenAI() as fake:  # the run's tokens as the server counts them
            counted = fake.limit(tokens=2**62, window=args.window)
            backfill(work, "count", fake, args, "none")
            total = sum(t for _, t in counted.log)
            requests = len(counted.log)
        limit = total // args.share
        for runner in args.console.split(","):
            with FakeOpenAI(latency=args.latency) as fake:
                window = fake.limit(tokens=limit, window=args.window)
                run = backfill(work, runner, fake, args, runner)
                log = list(window.log)
                refusals = list(window.refusals)
                most = fake.max_in_flight
            if args.timeline:  # each admission: seconds from the first, and its tokens
                print(runner, " ".join(f"{at - log[0][0]:.2f}:{t}" for at, t in log))
                print(runner, "429 at", " ".join(f"{at - log[0][0]:.2f}" for at in refusals))
            first, last = log[0][0], log[-1][0]
            tokens = sum(t for _, t in log)
            received = len(log) + window.refused
            rows.append(
                {
                    "runner": runner,
                    "s": run["ended"] - run["started"],
                    "received": received,
                    "refused": window.refused,
                    "ok": run["counters"].get("sessions_succeeded", 0),
                    "failed": run["counters"].get("sessions_failed", 0),
                    "span": last - first,
                    "most": most,
                    "strict": tokens / (limit * (last - first + args.window) / args.window),
                    "over_run": tokens / (limit * (run["ended"] - first) / args.window),
                }
            )
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(f"run started {at}, load average then {load} (1, 5, 15 min)")
    print(
        f"{args.rollouts} sessions: {requests} requests, {total:,} tokens as the server counts "
        f"them; limit {limit:,} tokens per {args.window:g} s (/ {args.share}), latency "
        f"{args.latency:g} s, --concurrency {args.concurrency}"
    )
    header = (
        "runner",
        "wall s",
        "requests",
        "429s",
        "429/req",
        "ok",
        "failed",
        "in flight",
        "span s",
        "strict",
        "over run",
    )
    print("{:>7} {:>7} {:>9} {:>5} {:>8} {:>4} {:>7} {:>9} {:>7} {:>7} {:>9}".format(*header))
    for r in rows:
        print(
            f"{r['runner']:>7} {r['s']:>7.1f} {r['received']:>9} {r['refused']:>5} "
            f"{r['refused'] / r['received']:>8.1%} {r['ok']:>4} {r['failed']:>7} {r['most']:>9} "
            f"{r['span']:>7.2f} {r['strict']:>7.1%} {r['over_run']:>9.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--window", type=float, default=10.0, help="the limit's window, s")
    parser.add_argument("--share", type=int, default=6, help="limit = run's tokens / share")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per answer")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-retries", type=int, default=4, help="the client's (default 4)")
    parser.add_argument("--modes", default="fixed,controller")
    parser.add_argument("--console", default=None, help="runners: none,thread,dask")
    parser.add_argument("--tmp", default=None, help="where the temporary folder goes")
    parser.add_argument("--timeline", action="store_true", help="print each admission")
    args = parser.parse_args()
    if args.console:
        console(args)
        return

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results = []
    with tempfile.TemporaryDirectory(prefix="memkiln-bench-ratelimit-") as tmp:
        work = Path(tmp)
        make_archive(work / "archive", args.rollouts)
        base = Settings(
            archive=work / "archive",
            db=work / "m.duckdb",
            backfill=True,
            min_rollout_idle_hours=0,
            max_rollouts_per_run=args.rollouts,
            progress=False,
        )
        for mode in args.modes.split(","):
            results.append(measure(mode, base, work, args))
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores"
    )
    print(f"run started {at}, load average then {load} (1, 5, 15 min)")
    print(
        f"{args.rollouts} sessions, limit {results[0]['limit']:,} tokens per {args.window:g} s "
        f"(the run's tokens / {args.share}), latency {args.latency:g} s, "
        f"--concurrency {args.concurrency}, client retries {args.max_retries}"
    )
    header = ("mode", "wall s", "requests", "429s", "429/req", "ok", "failed", "util.", "strict")
    print("{:>11} {:>7} {:>9} {:>6} {:>8} {:>5} {:>7} {:>7} {:>7}".format(*header))
    for r in results:
        print(
            f"{r['mode']:>11} {r['s']:>7.1f} {r['received']:>9} {r['refused']:>6} "
            f"{r['per_request']:>8.1%} {r['ok']:>5} {r['failed']:>7} {r['utilisation']:>7.1%} "
            f"{r['strict']:>7.1%}"
        )


if __name__ == "__main__":
    main()
