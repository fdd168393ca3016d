"""Crash safety: SIGKILL the real ``memkiln`` console script at random points of ingest,
extraction and consolidation, rerun, and check that nothing was lost, doubled or half-written.

Each trial starts from a prepared state for its phase (a copy), starts the phase's command,
waits for the command to start writing (the DuckDB WAL appears, or the model server receives
its first request), then kills it with SIGKILL after a random share of that phase's measured
working time. It then checks what the killed run left, reruns the remaining phases through
the console script, and compares the result with a reference run of the same state that was
never killed:

- the database opens and every ``sql/audits`` query returns zero rows (no duplicate rows);
- exactly one current outcome per eligible session, the same as the reference, and the same
  stored outputs;
- every memory file left by the killed run is, byte for byte, the version before the run or
  the version after it (never a partial one); after the rerun the memory folder equals the
  reference's and holds no temporaries;
- no ``runs`` row is left ``running``.

Extraction uses the ``openai`` backend against ``tests/fake_openai.py`` slowed down
(``--latency``), so that many requests are in flight when the kill comes. Consolidation is
killed while it replaces the files of the first archive half with those of the whole archive.
Run from the repository root:

    python bench/chaos.py                   # 21 trials (7 per phase), about 5-8 minutes
    python bench/chaos.py --trials 3 --quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memkiln.io.memory_files import TEMP_PREFIX  # noqa: E402
from memkiln.io.store import audits, open_store  # noqa: E402

SAMPLE = REPO / "data" / "sample-archive"
CORPUS = REPO.parent / "shared" / "corpus" / "rollouts"
PHASES = ("ingest", "extract", "consolidate")
MEMKILN = str(Path(sys.executable).with_name("memkiln"))


@dataclass
class Trial:
    """One killed run and what the checks found."""

    phase: str
    delay: float
    killed: bool
    problems: list[str] = field(default_factory=list)
    runs_left_running: int = 0


@dataclass
class Bench:
    """The prepared states, the references and the model server of one chaos run."""

    work: Path
    base_url: str
    latency: float
    states: dict[str, Path] = field(default_factory=dict)
    references: dict[str, dict[str, object]] = field(default_factory=dict)
    window: dict[str, float] = field(default_factory=dict)  # seconds of work per phase
    requests_log: Path | None = None
    #: reruns and preparation in this process (the same functions the commands call) rather
    #: than through the console script: the fast variant the test suite runs
    in_process: bool = False

    @property
    def live(self) -> Path:
        """Where every state is built and every trial runs: one path, so that the absolute
        paths stored (and shown to the model) are the same in a trial and its reference."""
        return self.work / "live"


# ------------------------------------------------------------------ commands


def env_for(state: Path) -> dict[str, str]:
    env = os.environ | {
        "MEMKILN_HOME": str(state / "home"),
        "COLUMNS": "200",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    env.pop("OPENAI_API_KEY", None)  # a local server needs none
    return env


def command(phase: str, state: Path, base_url: str) -> list[str]:
    common = ["--no-prefect", "--no-progress", "--db", str(state / "m.duckdb")]
    if phase == "ingest":
        return [MEMKILN, "ingest", "--archive", str(state / "archive"), *common, "--batch-mb", "1"]
    if phase == "extract":
        return [
            MEMKILN, "extract", *common, "--backend", "openai", "--base-url", base_url,
            "--model", "fake-model", "--backfill", "--min-idle-hours", "0",
            "--sources", "cli,vscode,exec", "--concurrency", "2", "--max-retries", "0",
        ]  # fmt: skip
    return [MEMKILN, "consolidate", *common, "--out", str(state / "memories")]


def run(phase: str, state: Path, bench: Bench) -> float:
    """Run one phase to completion through the console script (or, with ``in_process``,
    through the functions it calls); returns its wall time."""
    started = time.monotonic()
    if bench.in_process:
        run_in_process(phase, state, bench.base_url)
        return time.monotonic() - started
    done = subprocess.run(
        command(phase, state, bench.base_url),
        env=env_for(state),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memkiln {phase} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def run_in_process(phase: str, state: Path, base_url: str) -> None:
    from memkiln.pipeline.consolidate import consolidate_store
    from memkiln.pipeline.extract import extract_store
    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    settings = Settings(
        archive=state / "archive", db=state / "m.duckdb", out=state / "memories",
        batch_bytes=1024 * 1024, backend="openai", base_url=base_url, model="fake-model",
        backfill=True, min_rollout_idle_hours=0, sources=["cli", "vscode", "exec"],
        concurrency=2, max_retries=0,
    )  # fmt: skip
    if phase == "ingest":
        ingest_archive(settings)
    elif phase == "extract":
        extract_store(settings)
    else:  # the command's default backend for phase 2
        consolidate_store(settings.model_copy(update={"backend": "heuristic"}))


def started_writing(phase: str, state: Path, bench: Bench, requests_before: int) -> bool:
    """The command is past its start-up: the WAL exists (ingest, consolidate) or the model
    server got a request (extract)."""
    if phase == "extract":
        return requests_seen(bench) > requests_before
    return (state / "m.duckdb.wal").exists()


def requests_seen(bench: Bench) -> int:
    log = bench.requests_log
    if log is None or not log.exists():
        return 0
    with log.open("rb") as fh:
        return sum(1 for _ in fh)


def run_killed(phase: str, state: Path, bench: Bench, delay: float | None) -> tuple[bool, float]:
    """Start the phase, wait until it writes, then SIGKILL it ``delay`` seconds later (never,
    when ``delay`` is None). Returns whether it was still running when killed, and the
    seconds from its first write to its end."""
    before = requests_seen(bench)
    proc = subprocess.Popen(
        command(phase, state, bench.base_url),
        env=env_for(state),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not started_writing(phase, state, bench, before):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        began = time.monotonic()
        if delay is None:
            _, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"memkiln {phase} failed ({proc.returncode}): {err[-2000:]}")
            return False, time.monotonic() - began
        while time.monotonic() - began < delay and proc.poll() is None:
            time.sleep(0.005)
        alive = proc.poll() is None
        if alive:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        return alive, time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# ------------------------------------------------------------------ states and snapshots


def to_live(bench: Bench, state: Path) -> Path:
    """A fresh copy of ``state`` at the live path."""
    shutil.rmtree(bench.live, ignore_errors=True)
    shutil.copytree(state, bench.live, symlinks=True)
    return bench.live


def keep_live(bench: Bench, name: str) -> Path:
    """Move the live folder to ``name`` (a prepared state)."""
    dest = bench.work / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(bench.live, dest)
    return dest


def snapshot_files(out: Path) -> dict[str, bytes]:
    if not out.exists():
        return {}
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.name.startswith(TEMP_PREFIX)
    }


def temporaries(out: Path) -> list[str]:
    if not out.exists():
        return []
    return [str(p.relative_to(out)) for p in out.rglob(f"{TEMP_PREFIX}*")]


def store_facts(db: Path, *, opened_as_next_run: bool = False) -> dict[str, object]:
    """What the checks compare: audits, job states, outputs, table sizes, running runs.

    ``opened_as_next_run``: open the file as the next run would (read-write, applying the
    schema files a run killed while creating the database had not applied yet: each is its
    own transaction, so such a file holds a prefix of them)."""
    con = open_store(db, read_only=not opened_as_next_run)
    try:

        def q(sql: str) -> list[tuple[object, ...]]:
            return [tuple(r) for r in con.execute(sql).fetchall()]

        return {
            "audits": audits(con),
            "jobs": q("select rollout_id, status from stage1_jobs order by 1"),
            "duplicate_jobs": q(
                "select rollout_id from stage1_jobs group by 1 having count(*) > 1"
            ),
            "outputs": q(
                "select rollout_id, raw_memory, rollout_summary, rollout_slug "
                "from stage1_outputs order by 1"
            ),
            "sizes": q(
                "select (select count(*) from files), (select count(*) from rollouts), "
                "(select count(*) from items), (select count(*) from quarantine), "
                "(select count(*) from consolidation_jobs)"
            ),
            "projects": q("select project_key, status from consolidation_jobs order by 1"),
            "running_runs": q("select command from runs where status = 'running'"),
        }
    finally:
        con.close()


def phases_from(phase: str) -> tuple[str, ...]:
    return PHASES[PHASES.index(phase) :]


def prepare(bench: Bench, *, quick: bool, corpus_mb: float) -> None:
    """Build each phase's starting state, time each phase, and run each state to its
    reference result."""
    seed = bench.work / "seed"
    first_half, second_half = seed / "first", seed / "second"
    shutil.copytree(SAMPLE, first_half, ignore=shutil.ignore_patterns("*.md"))
    second_half.mkdir(parents=True)
    if not quick and CORPUS.is_dir():
        budget = corpus_mb * 1_000_000
        for path in sorted(CORPUS.rglob("*.jsonl")):
            size = path.stat().st_size
            if size > budget or size > 3_000_000:
                continue
            rel = path.relative_to(CORPUS)
            dest = second_half / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            budget -= size
    else:  # the quick run: the sample's Codex sessions arrive in the second half
        for path in sorted((first_half / "sessions").rglob("*.jsonl"))[::2]:
            dest = second_half / path.relative_to(first_half)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, dest)

    def merged(state: Path) -> None:
        shutil.copytree(second_half, state / "archive", dirs_exist_ok=True)

    live = bench.live
    shutil.rmtree(live, ignore_errors=True)
    # ingest: the whole archive, nothing stored yet
    shutil.copytree(first_half, live / "archive")
    merged(live)
    bench.states["ingest"] = keep_live(bench, "state-ingest")
    # extract: the whole archive ingested
    run("ingest", to_live(bench, bench.states["ingest"]), bench)
    bench.states["extract"] = keep_live(bench, "state-extract")
    # consolidate: the first half done to the end, the second ingested and extracted; the
    # killed consolidation replaces the first half's files
    shutil.copytree(first_half, live / "archive")
    for phase in PHASES:
        run(phase, live, bench)
    merged(live)
    run("ingest", live, bench)
    run("extract", live, bench)
    bench.states["consolidate"] = keep_live(bench, "state-consolidate")
    # references: each state run to the end, never killed; the working time of each phase
    for phase in PHASES:
        ref = to_live(bench, bench.states[phase])
        for step in phases_from(phase):
            if step == phase and bench.in_process:  # no start-up: all of it is work
                bench.window[phase] = max(run(step, ref, bench), 0.1)
            elif step == phase:  # the working time: from its first write to its end
                _, seconds = run_killed(step, ref, bench, None)
                bench.window[phase] = max(seconds, 0.1)
            else:
                run(step, ref, bench)
        bench.references[phase] = store_facts(ref / "m.duckdb") | {
            "files": snapshot_files(ref / "memories")
        }
    shutil.rmtree(live, ignore_errors=True)


# ------------------------------------------------------------------ one trial


def trial(bench: Bench, n: int, phase: str, rng: random.Random) -> Trial:
    state = to_live(bench, bench.states[phase])
    before_files = snapshot_files(state / "memories")
    delay = rng.uniform(0, bench.window[phase])
    killed, _ = run_killed(phase, state, bench, delay)
    result = Trial(phase, round(delay, 3), killed)
    problems = result.problems
    # what the killed run left: a database that opens, and files old or new, never partial
    try:
        left = store_facts(state / "m.duckdb", opened_as_next_run=True)
        if any(left["audits"].values()):  # type: ignore[attr-defined]
            problems.append(f"audits after the kill: {left['audits']}")
    except Exception as exc:  # a database that does not open is the finding
        problems.append(f"the database does not open after the kill: {exc}")
    reference = bench.references[phase]
    after_kill = snapshot_files(state / "memories")
    final_files: dict[str, bytes] = reference["files"]  # type: ignore[assignment]
    for rel, data in after_kill.items():
        if data != before_files.get(rel) and data != final_files.get(rel):
            problems.append(f"{rel} is neither its old nor its new version after the kill")
    # rerun to the end, then compare with the run that was never killed
    try:
        for step in phases_from(phase):
            run(step, state, bench)
    except RuntimeError as exc:
        problems.append(f"rerun failed: {exc}")
        return result
    facts = store_facts(state / "m.duckdb")
    if any(facts["audits"].values()):  # type: ignore[attr-defined]
        problems.append(f"audits after the rerun: {facts['audits']}")
    for key in ("jobs", "duplicate_jobs", "outputs", "sizes", "projects"):
        if facts[key] != reference[key]:
            problems.append(f"{key} differ from the reference after the rerun")
    if snapshot_files(state / "memories") != final_files:
        problems.append("memory files differ from the reference after the rerun")
    if temporaries(state / "memories"):
        problems.append(f"temporaries left: {temporaries(state / 'memories')[:3]}")
    result.runs_left_running = len(facts["running_runs"])  # type: ignore[arg-type]
    return result


# ------------------------------------------------------------------ the whole run


def start_server(latency: float, log: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--latency", str(latency),
         "--log", str(log)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"fake server did not start: {line!r}")
    return proc, line.split()[1]


def run_trials(
    trials: int,
    *,
    seed: int = 1,
    work: Path | None = None,
    latency: float = 0.25,
    quick: bool = False,
    corpus_mb: float = 6.0,
    in_process: bool = False,
) -> list[Trial]:
    """Prepare, then run ``trials`` killed runs (phases in turn); returns every trial."""
    owned = work is None
    root = Path(tempfile.mkdtemp(prefix="memkiln-chaos-")) if owned else work
    assert root is not None
    root.mkdir(parents=True, exist_ok=True)
    log = root / "requests.jsonl"
    server, url = start_server(latency, log)
    try:
        bench = Bench(
            work=root, base_url=url, latency=latency, requests_log=log, in_process=in_process
        )
        prepare(bench, quick=quick, corpus_mb=corpus_mb)
        rng = random.Random(seed)
        return [trial(bench, n, PHASES[n % len(PHASES)], rng) for n in range(trials)]
    finally:
        server.terminate()
        server.wait(timeout=10)
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def tally(results: list[Trial]) -> dict[str, object]:
    clean = [t for t in results if not t.problems]
    return {
        "trials": len(results),
        "clean": len(clean),
        "clean_with_no_run_left_running": sum(1 for t in clean if not t.runs_left_running),
        "killed_while_running": sum(t.killed for t in results),
        "by_phase": {
            phase: f"{sum(1 for t in results if t.phase == phase and not t.problems)}/"
            f"{sum(1 for t in results if t.phase == phase)}"
            for phase in PHASES
        },
        "runs_left_running": dict(
            Counter(t.phase for t in results for _ in range(t.runs_left_running))
        ),
        "problems": [
            f"trial {i} ({t.phase}): {p}" for i, t in enumerate(results) for p in t.problems
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=21)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.25, help="model server latency (s)")
    parser.add_argument("--corpus-mb", type=float, default=6.0, help="corpus files added")
    parser.add_argument("--quick", action="store_true", help="the sample archive only")
    parser.add_argument("--work", type=Path, default=None, help="keep the states here")
    parser.add_argument("--json", type=Path, default=None, help="write the tally here")
    args = parser.parse_args()
    began = time.monotonic()
    results = run_trials(
        args.trials, seed=args.seed, work=args.work, latency=args.latency, quick=args.quick,
        corpus_mb=args.corpus_mb,
    )  # fmt: skip
    summary = tally(results) | {"seconds": round(time.monotonic() - began, 1)}
    for i, t in enumerate(results):
        status = "clean" if not t.problems else "PROBLEMS"
        print(
            f"trial {i:3d} {t.phase:<12} kill after {t.delay:6.3f}s "
            f"{'(was running)' if t.killed else '(had finished)'}  {status}"
            + (f"  runs left running: {t.runs_left_running}" if t.runs_left_running else "")
        )
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["clean"] == summary["trials"] else 1  # runs left running: reported


if __name__ == "__main__":
    raise SystemExit(main())
