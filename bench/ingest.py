"""Ingest throughput benchmark: memkiln vs a plain-Python baseline vs DuckDB's JSON reader.

    python bench/ingest.py [--sizes 250,500] [--work DIR] [--baseline-mb 50] [--repeat 1]

For each size (MiB) a synthetic Codex archive is generated (or reused, see ``bench/synth.py``)
and every measurement runs in its own child process (this script with ``--phase``), so each
peak RSS is that phase's alone (the child's ``VmHWM`` from ``/proc/self/status`` when it
finishes; it includes the interpreter and imports, shown separately as "RSS after imports").
Throughput is archive bytes / wall time of the measured work only (imports and process start-up
excluded); with ``--repeat N`` the fastest run is reported (the machine may be shared) and the
highest peak RSS. The page cache is warmed first, so no phase pays for the disk.

* ``memkiln``: ``ingest_archive`` (no Prefect) into a fresh DuckDB file; with ``--prefect``,
  ``memkiln ingest`` as a user runs it (Prefect on: its temporary API server, the flow and a
  task per batch), in its own ``MEMKILN_HOME`` and ``PREFECT_HOME``, measured as the CPU of
  that process and the children it waited for (Prefect's server among them).
* ``baseline``: plain Python over the first ``--baseline-mb`` MiB of files of the largest archive:
  per line ``json.loads`` plus the same secret rules, translated to ``re``, applied pass by pass
  with ``re.sub`` (base64-blob removal is not included, which favours the baseline).
* ``reference``: DuckDB ``read_json`` with a narrow column list over all files of the archive,
  aggregated so that every line is read and parsed: the machine's JSON reading rate.

MB means MiB (2**20 bytes) throughout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process import child_env, console_script_defaults
from synth import MIB, ensure_archive

HERE = Path(__file__).resolve().parent
TARGET_VS_BASELINE = 20.0
TARGET_VS_REFERENCE = 0.25
RSS_LIMIT_MB = 1536


def _maxrss_mb() -> float:
    """This process's peak RSS in MiB: ``VmHWM`` from ``/proc/self/status`` on Linux.

    Not ``getrusage().ru_maxrss``: Linux carries the parent's high-water mark across
    fork/vfork + exec into the child's ``ru_maxrss``, so a child would report at least the
    parent's peak.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if sys.platform == "darwin" else rss / 1024


def _cpu_seconds() -> float:
    """CPU time of this process so far, every thread, user + system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def steady_cpu_per_gb(small: dict, large: dict) -> float:  # type: ignore[type-arg]
    """CPU-seconds per GiB of the work that grows with the archive: the difference between two
    archive sizes, so the start-up (imports, schema, first batch's compile caches) cancels."""
    gib = (large["bytes"] - small["bytes"]) / (1 << 30)
    return (large["cpu_seconds"] - small["cpu_seconds"]) / gib


def old_tree(work: Path, ref: str) -> Path:
    """A ``git archive`` snapshot of ``ref`` (memkiln's code as it was), run through PYTHONPATH
    beside the current code: ``work/old-<ref>``."""
    dest = work / f"old-{ref}"
    if not (dest / "memkiln").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        repo = HERE.parent
        tar = subprocess.run(
            ["git", "archive", ref, "memkiln"], cwd=repo, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest


def _files(archive: Path) -> list[Path]:
    """The archive's files in memkiln's discovery order (sorted walk)."""
    out: list[Path] = []
    for root, dirs, names in os.walk(archive):
        dirs.sort()
        out.extend(Path(root) / n for n in sorted(names) if n.endswith(".jsonl"))
    return out


# -- phases (run in child processes) ----------------------------------------------------------


def phase_memkiln(archive: Path, db: Path) -> dict:  # type: ignore[type-arg]
    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    settings = Settings(archive=archive, db=db)
    rss_imports = _maxrss_mb()
    cpu0 = _cpu_seconds()
    t0 = time.perf_counter()
    summary = ingest_archive(settings)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "cpu_seconds": _cpu_seconds() - cpu0,
        "bytes": summary.bytes_read,
        "rollouts": summary.rollouts,
        "items": summary.items,
        "quarantined": summary.quarantined,
        "files_failed": summary.files_failed,
        "hits": sum(summary.hits.values()),
        "db_mb": db.stat().st_size / MIB,
        "rss_imports_mb": rss_imports,
        "rss_mb": _maxrss_mb(),
        "batch_mb": settings.batch_bytes / MIB,
    }


def phase_memkiln_prefect(archive: Path, db: Path) -> dict:  # type: ignore[type-arg]
    """``memkiln ingest`` with Prefect on, in a child process: its CPU and its children's."""
    import shutil
    import tempfile

    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    home = Path(tempfile.mkdtemp(prefix="memkiln-bench-", dir=db.parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMKILN_", "PREFECT_"))}
    env |= {"MEMKILN_HOME": str(home), "PREFECT_HOME": str(home / "prefect")}
    env |= {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    cmd = [
        sys.executable, "-c", "import sys; from memkiln.cli import main; sys.exit(main())",
        "ingest", "--archive", str(archive), "--db", str(db), "--no-progress",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(home, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"memkiln ingest failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "bytes": sum(f.stat().st_size for f in _files(archive)),
        "rollouts": len(_files(archive)),
        "db_mb": db.stat().st_size / MIB,
        "rss_imports_mb": 0.0,
        "rss_mb": after.ru_maxrss / 1024,  # the largest child's peak (Linux: KiB)
    }


def python_rules() -> tuple[list[tuple[str, re.Pattern[str], str]], int, list[str]]:
    """memkiln's redaction passes translated from Rust-regex to Python ``re`` syntax.

    Returns ``(passes, used, skipped)``: each pass is ``(name, compiled alternation,
    replacement)`` over the rules that compile; ``used`` counts those rules, ``skipped`` names
    the rules that do not compile (with the error).
    """
    from memkiln.io.rules import load_rules

    rules = load_rules()
    passes: list[tuple[str, re.Pattern[str], str]] = []
    skipped: list[str] = []
    used = 0
    for rule_pass in rules.passes:
        members = [r for r in rules.rules if r.pass_name == rule_pass.name]
        kept = []
        for rule in members:
            try:
                _compile(_to_python(rule.pattern))
                kept.append(rule)
            except re.error as err:
                skipped.append(f"{rule.id}: {err}")
        used += len(kept)
        if not kept:
            continue
        # Rebuild the pass like memkiln does (groups numbered across the alternation).
        prefixes, suffixes, offset = [], [], 0
        for rule in kept:
            if rule.keep_prefix:
                prefixes.append(f"\\g<{offset + 1}>")
            if rule.keep_suffix:
                suffixes.append(f"\\g<{offset + 2}>")
            offset += rule.group_count
        pattern = "|".join(f"(?:{_to_python(r.pattern)})" for r in kept)
        replacement = "".join(prefixes) + "[REDACTED_SECRET]" + "".join(suffixes)
        passes.append((rule_pass.name, _compile(pattern), replacement))
    return passes, used, skipped


def _compile(pattern: str) -> re.Pattern[str]:
    """``re.compile``, failing on what Python reads differently from Rust (nested classes and
    class set operations are literal characters to Python, with a ``FutureWarning``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        try:
            return re.compile(pattern)
        except FutureWarning as warning:
            raise re.error(f"Rust-only character class syntax ({warning})") from None


#: Rust escapes that Python spells differently (``\x{HHHH}``, ``\z``), when the backslash is
#: not itself escaped.
_RUST_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:x\{([0-9A-Fa-f]{1,6})\}|(z))")


def _to_python(pattern: str) -> str:
    r"""Rust-regex syntax to Python ``re``: ``\x{HHHH}`` becomes ``\U0000HHHH``, ``\z``
    becomes ``\Z``, Rust's ASCII word boundary ``(?-u:\b)`` becomes Python's scoped ASCII flag
    ``(?a:\b)`` (the same boundary) and a class difference ``[[A]--[B]]`` a negative lookahead.
    Anything else Python does not know (``\p{..}``, POSIX classes, other set operations)
    fails to compile, and the caller skips that rule."""
    pattern = _class_differences(pattern.replace(r"(?-u:\b)", r"(?a:\b)"))

    def escape(m: re.Match[str]) -> str:
        if m.group(2):
            return m.group(1) + f"\\U{int(m.group(2), 16):08x}"
        return m.group(1) + "\\Z"

    return _RUST_ESCAPE.sub(escape, pattern)


def _class_end(p: str, i: int) -> int:
    """Index just after the simple character class that starts at ``p[i] == "["``; -1 when the
    class is nested or not closed."""
    j = i + 1
    if p[j : j + 1] == "^":
        j += 1
    if p[j : j + 1] == "]":
        j += 1
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
        elif c == "[":
            return -1
        elif c == "]":
            return j + 1
        else:
            j += 1
    return -1


def _class_differences(p: str) -> str:
    """Rust's class difference ``[[A]--[B]]`` as ``(?:(?![B])[A])``, which Python can run."""
    out: list[str] = []
    i = 0
    while i < len(p):
        if p[i] == "\\":
            out.append(p[i : i + 2])
            i += 2
            continue
        if p.startswith("[[", i):
            a_end = _class_end(p, i + 1)
            if a_end > 0 and p.startswith("--[", a_end):
                b_end = _class_end(p, a_end + 2)
                if b_end > 0 and p[b_end : b_end + 1] == "]":
                    out.append(f"(?:(?!{p[a_end + 2 : b_end]}){p[i + 1 : a_end]})")
                    i = b_end + 1
                    continue
        if p[i] == "[":
            end = _class_end(p, i)
            if end > 0:
                out.append(p[i:end])
                i = end
                continue
        out.append(p[i])
        i += 1
    return "".join(out)


def phase_baseline(archive: Path, limit_mb: float) -> dict:  # type: ignore[type-arg]
    passes, used, skipped = python_rules()
    files: list[Path] = []
    total = 0
    for path in _files(archive):
        if total >= limit_mb * MIB:
            break
        files.append(path)
        total += path.stat().st_size
    rss_imports = _maxrss_mb()
    loads = json.loads
    lines = hits = 0
    t0 = time.perf_counter()
    for path in files:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                loads(line)
                for _name, rx, repl in passes:
                    line, n = rx.subn(repl, line)
                    hits += n
                lines += 1
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    for path in files:  # the same loop without redaction: where the baseline's time goes
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                loads(line)
    loads_seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "loads_seconds": loads_seconds,
        "bytes": total,
        "rollouts": len(files),
        "items": lines,
        "hits": hits,
        "rules_used": used,
        "passes": len(passes),
        "rules_skipped": skipped,
        "rss_imports_mb": rss_imports,
        "rss_mb": _maxrss_mb(),
    }


REFERENCE_SQL = """
select count(*) as n_lines,
       count(distinct filename) as n_files,
       sum(length(timestamp)) + sum(length(type)) + sum(length(payload.type)) as n_chars
from read_json($glob, format = 'newline_delimited', filename = true,
               columns = {timestamp: 'VARCHAR', type: 'VARCHAR',
                          payload: 'STRUCT(type VARCHAR)'})
"""


def phase_reference(archive: Path) -> dict:  # type: ignore[type-arg]
    import duckdb

    files = _files(archive)
    total = sum(p.stat().st_size for p in files)
    con = duckdb.connect()
    threads = con.sql("select current_setting('threads')").fetchall()[0][0]
    rss_imports = _maxrss_mb()
    t0 = time.perf_counter()
    n_lines, n_files, _chars = con.execute(
        REFERENCE_SQL, {"glob": str(archive / "sessions" / "**" / "*.jsonl")}
    ).fetchall()[0]
    seconds = time.perf_counter() - t0
    con.close()
    return {
        "seconds": seconds,
        "bytes": total,
        "rollouts": n_files,
        "items": n_lines,
        "threads": threads,
        "rss_imports_mb": rss_imports,
        "rss_mb": _maxrss_mb(),
    }


def run_phase(args: argparse.Namespace) -> int:
    if args.phase == "memkiln":
        allocator = console_script_defaults()
        out = phase_memkiln(args.archive, args.db)
        out["allocator"] = allocator
    elif args.phase == "memkiln-prefect":
        out = phase_memkiln_prefect(args.archive, args.db)
    elif args.phase == "baseline":
        out = phase_baseline(args.archive, args.baseline_mb)
    else:
        out = phase_reference(args.archive)
    print("RESULT " + json.dumps(out))
    return 0


def child(phase: str, archive: Path, *, code: Path | None = None, **extra: object) -> dict:  # type: ignore[type-arg]
    """Run one phase in a child process; memkiln is imported from ``code`` (the old code of a
    side-by-side run) or else from this checkout."""
    cmd = [sys.executable, __file__, "--phase", phase, "--archive", str(archive)]
    for key, value in extra.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    # the new code is this checkout's (not whichever memkiln the interpreter has installed)
    env = child_env(PYTHONPATH=str(code if code is not None else HERE.parent))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"phase {phase} on {archive} failed (exit {proc.returncode})")
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


# -- driver -----------------------------------------------------------------------------------


def _warm(archive: Path) -> None:
    for path in _files(archive):
        with open(path, "rb") as fh:
            while fh.read(8 * MIB):
                pass


def _best(runs: list[dict]) -> dict:  # type: ignore[type-arg]
    """The fastest run (the machine is shared: slower runs measure the neighbours), with the
    highest peak RSS of all runs."""
    runs = sorted(runs, key=lambda r: r["seconds"])
    out = dict(runs[0])
    out["seconds_all"] = [r["seconds"] for r in runs]
    out["cpu_all"] = [r.get("cpu_seconds", 0.0) for r in runs]
    out["rss_mb"] = max(r["rss_mb"] for r in runs)
    return out


def _rate(r: dict) -> tuple[float, float]:  # type: ignore[type-arg]
    return r["bytes"] / MIB / r["seconds"], r["rollouts"] / r["seconds"]


def machine_facts() -> dict[str, str]:
    import duckdb
    import polars

    import memkiln

    src = Path(memkiln.__file__).parent
    digest = hashlib.sha1()
    for path in sorted(src.rglob("*")):
        if path.suffix in (".py", ".sql", ".toml"):
            digest.update(path.read_bytes())
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=src, capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "commit": head or "?",
        "source sha1": digest.hexdigest()[:10],
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "polars": polars.__version__,
        "duckdb": duckdb.__version__,
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Benchmark memkiln's ingest against a plain-Python baseline and DuckDB's "
        "read_json on synthetic Codex archives (sizes in MiB).",
    )
    parser.add_argument(
        "--sizes", default="250,500", help="archive sizes in MiB, comma-separated (250,500)"
    )
    parser.add_argument("--work", type=Path, default=HERE / "work", help="work dir (bench/work)")
    parser.add_argument(
        "--baseline-mb",
        type=float,
        default=None,
        help="MiB of files the slow plain-Python baseline runs on "
        "(default 50, or a quarter of the largest size when that is smaller)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per memkiln/reference phase")
    parser.add_argument("--seed", type=int, default=0, help="synthetic archive seed (0)")
    parser.add_argument("--keep-db", action="store_true", help="keep the DuckDB files")
    parser.add_argument(
        "--old",
        default="6fc8c24",
        help="git ref of the old code, run side by side from a git-archive snapshot "
        "(6fc8c24; 'none' to skip)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated phases to leave out: baseline, reference (slow on a busy machine)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument(
        "--phase",
        choices=["memkiln", "memkiln-prefect", "baseline", "reference"],
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--prefect",
        action="store_true",
        help="run memkiln as 'memkiln ingest' with Prefect on (its CPU and its children's)",
    )
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        return run_phase(args)

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.baseline_mb is None:
        args.baseline_mb = min(50.0, max(sizes) / 4)
    args.work.mkdir(parents=True, exist_ok=True)
    facts = machine_facts()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()), flush=True)

    archives = {}
    for mb in sizes:
        a = ensure_archive(args.work, mb, seed=args.seed)
        how = "reused" if a.reused else f"generated in {a.seconds:.1f} s"
        print(f"archive {mb} MiB: {a.files} files, {a.bytes / MIB:.1f} MiB, {how}", flush=True)
        archives[mb] = a
        _warm(a.path)

    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    codes: list[tuple[str, Path | None]] = [("memkiln", None)]
    if args.old.lower() != "none":
        codes.append((f"old {args.old}", old_tree(args.work, args.old)))
    results: dict[str, dict] = {}  # type: ignore[type-arg]
    for mb in sizes:
        a = archives[mb]
        db = args.work / f"bench-ingest-{mb}mb.duckdb"
        runs: dict[str, list[dict]] = {kind: [] for kind, _ in codes}  # type: ignore[type-arg]
        for i in range(args.repeat):
            for kind, code in codes:  # alternating, so both see the same neighbours
                print(f"{kind} {mb} MiB run {i + 1}/{args.repeat} ...", flush=True)
                phase = "memkiln-prefect" if args.prefect else "memkiln"
                runs[kind].append(child(phase, a.path, code=code, db=db))
        for kind, _ in codes:
            results[f"{kind} {mb}"] = _best(runs[kind])
        if not args.keep_db:
            for p in (db, db.with_name(db.name + ".wal")):
                p.unlink(missing_ok=True)
        if "reference" not in skip:
            ref_runs = []
            for i in range(args.repeat):
                print(f"reference {mb} MiB run {i + 1}/{args.repeat} ...", flush=True)
                ref_runs.append(child("reference", a.path))
            results[f"reference {mb}"] = _best(ref_runs)

    largest = archives[max(sizes)]
    base = None
    if "baseline" not in skip:
        print(f"baseline on the first {args.baseline_mb:g} MiB of the {max(sizes)} MiB archive ...")
        base = child("baseline", largest.path, baseline_mb=args.baseline_mb)
        results["baseline"] = base

    base_rate = _rate(base)[0] if base else None
    rows = []
    for mb in sizes:
        ref = results.get(f"reference {mb}")
        ref_rate = _rate(ref)[0] if ref else None
        for kind, _ in codes:
            rows.append((kind, results[f"{kind} {mb}"], ref_rate))
        if ref:
            rows.append(("reference", ref, ref_rate))
    if base:
        ref = results.get(f"reference {max(sizes)}")
        rows.append(("baseline", base, _rate(ref)[0] if ref else None))

    header = (
        "measurement",
        "size MB",
        "MB/s",
        "CPU-s/GB",
        "rollouts/s",
        "peak RSS MB",
        "vs baseline",
        "vs reference",
    )
    table = [header]
    for kind, r, ref_rate in rows:
        mbps, rps = _rate(r)
        size = f"{r['bytes'] / MIB:.0f}" + (" (subset)" if kind == "baseline" else "")
        cpu = r.get("cpu_seconds")
        table.append(
            (
                kind,
                size,
                f"{mbps:.1f}",
                f"{cpu / (r['bytes'] / (1 << 30)):.1f}" if cpu is not None else "",
                f"{rps:.1f}",
                f"{r['rss_mb']:.0f}",
                f"{mbps / base_rate:.1f}x" if base_rate else "",
                f"{mbps / ref_rate:.0%}" if ref_rate else "",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print()
    for n, row in enumerate(table):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))

    print()
    print(
        "CPU-s/GB: user + system CPU of the whole phase (every thread) per GiB read, start-up "
        "included; peak RSS: VmHWM of the child process that ran the phase (includes the "
        "interpreter and imports); RSS after imports: "
        + ", ".join(f"{k} {v['rss_imports_mb']:.0f} MB" for k, v in results.items())
    )
    for mb in sizes:
        for kind, _ in codes:
            m = results[f"{kind} {mb}"]
            print(
                f"{kind} {mb}: {m['rollouts']} rollouts, {m.get('items', '?')} items, "
                f"{m.get('quarantined', '?')} quarantined, {m.get('hits', '?')} secrets "
                f"redacted, DB {m['db_mb']:.0f} MB, batch {m.get('batch_mb', '?')} MB, "
                f"times {', '.join(f'{s:.1f}' for s in m['seconds_all'])} s (fastest reported), "
                f"CPU {m['cpu_seconds']:.1f} s, Polars allocator {m.get('allocator', '?')}"
            )
    if f"reference {max(sizes)}" in results:
        ref_threads = results[f"reference {max(sizes)}"]["threads"]
        print(
            f"reference: DuckDB read_json, {ref_threads} threads, columns timestamp, type, "
            "payload.type"
        )
    if base:
        print(
            f"baseline: ran on a SUBSET ({base['rollouts']} files, {base['bytes'] / MIB:.0f} "
            f"MiB, {base['items']} lines), json.loads + {base['rules_used']} rules in "
            f"{base['passes']} re passes, {base['hits']} secrets replaced; "
            f"rules skipped (do not compile in re): {len(base['rules_skipped'])}; "
            f"json.loads alone: {base['bytes'] / MIB / base['loads_seconds']:.0f} MB/s"
            + "".join(f"\n  - {s}" for s in base["rules_skipped"])
        )

    print()
    ok = True
    steady: dict[str, float] = {}
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        for kind, _ in codes:
            steady[kind] = steady_cpu_per_gb(
                _least_cpu(runs_of(results, kind, small)), _least_cpu(runs_of(results, kind, large))
            )
            print(
                f"steady-state CPU-s per GiB ({kind}, {large} MiB minus {small} MiB archive, "
                f"start-up cancelled): {steady[kind]:.1f}"
            )
        if len(codes) > 1:
            new, old = steady["memkiln"], steady[codes[1][0]]
            hit = new <= old / 2
            ok &= hit
            print(
                f"target steady-state CPU-s/GiB at most half the old code's: {new:.1f} vs "
                f"{old:.1f} ({new / old:.0%} of it): {'met' if hit else 'MISSED'}"
            )
    for mb in sizes:
        mbps = _rate(results[f"memkiln {mb}"])[0]
        ref_r = results.get(f"reference {mb}")
        for label, value, target, fmt in (
            ("vs baseline", mbps / base_rate if base_rate else None, TARGET_VS_BASELINE, "{:.1f}x"),
            (
                "vs reference",
                mbps / _rate(ref_r)[0] if ref_r else None,
                TARGET_VS_REFERENCE,
                "{:.0%}",
            ),
        ):
            if value is None:
                continue
            hit = value >= target
            ok &= hit
            print(
                f"target {label} at {mb} MiB: {fmt.format(value)} "
                f"(target >= {fmt.format(target)}): {'met' if hit else 'MISSED'}"
            )
    for kind, _ in codes:
        rss = [results[f"{kind} {mb}"]["rss_mb"] for mb in sizes]
        if len(sizes) > 1:
            growth = rss[-1] / rss[0] - 1
            flat = growth <= 0.15 and max(rss) < RSS_LIMIT_MB
            if kind == "memkiln":
                ok &= flat
            print(
                f"target flat RSS under {RSS_LIMIT_MB} MB ({kind}): "
                f"{' -> '.join(f'{x:.0f}' for x in rss)} MB over "
                f"{' -> '.join(str(s) for s in sizes)} MiB ({growth:+.0%}; flat means <= +15%): "
                f"{'met' if flat else 'MISSED'}"
            )
    if args.json:
        args.json.write_text(json.dumps({"machine": facts, "results": results}, indent=2))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average at the end: {load} (on {os.cpu_count()} cores)")
    print("all targets met" if ok else "some targets MISSED (see above)")
    return 0


def runs_of(results: dict, kind: str, mb: int) -> dict:  # type: ignore[type-arg]
    return results[f"{kind} {mb}"]


def _least_cpu(r: dict) -> dict:  # type: ignore[type-arg]
    """The run of ``r`` (a ``_best`` summary) with the least CPU: a busy neighbour adds CPU
    time (cache misses, a shared core), never removes it."""
    return {"bytes": r["bytes"], "cpu_seconds": min(r["cpu_all"])}


if __name__ == "__main__":
    sys.exit(main())
