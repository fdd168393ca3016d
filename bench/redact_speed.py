"""Throughput of redaction, before and after the maintained rule source's pass, in one run.

"before" is the rule set without its ``[source]`` (Betterleaks') rules: memkiln's own regex
passes and its entropy-gated ``[[context]]`` rule, as before issue 13's second round; "after"
the full rule set. Each measurement runs in its own child process, alternating before/after, on
the same synthetic Codex archive (bench/synth.py):

- redaction alone: every line of the archive through ``redact_expr`` (Polars, streaming
  engine), in 64 MB batches, then the post-condition count (zero matches of the regex passes);
- ingest: ``ingest_archive`` into a fresh DuckDB file (read, split, redact, parse, normalize,
  write), as ``memkiln ingest`` does without Prefect.

    .venv/bin/python bench/redact_speed.py [--mb 100] [--repeat 2]
    .venv/bin/python bench/redact_speed.py --profile [--mb 100]   # where the time goes

``--profile`` times each step of redaction in process on the first 64 MB batch: the unescape,
each regex pass, the source pass (key-word prefilter, routing of rows to rules by key word,
each rule's regex on the rows that hold its key words: how many rows reach it) and the
context pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from synth import ensure_archive  # noqa: E402

BATCH_BYTES = 64 * 1024 * 1024


def _use_variant(variant: str) -> None:
    from memkiln.io import rules as rules_module

    full = rules_module._packaged()
    if variant == "before":
        before = dataclasses.replace(full, external=None)
        rules_module._packaged = lambda: before  # type: ignore[method-assign]


def _profile(archive: Path) -> None:
    """Seconds per step of redaction, and rows reaching each source rule, on one batch."""
    from memkiln.io.rules import load_rules
    from memkiln.transforms import redact_source as rs
    from memkiln.transforms.redact import REDACTED, unescape_expr
    from memkiln.transforms.redact_context import redact_context_series

    rules = load_rules()
    lines: list[str] = []
    size = 0
    for path in sorted(archive.rglob("*.jsonl")):
        data = path.read_text(encoding="utf-8")
        lines += data.splitlines()
        size += len(data.encode())
        if size >= BATCH_BYTES:
            break
    series = pl.Series("line", lines, dtype=pl.String)
    print(f"batch: {size / 1e6:.1f} MB, {len(series):,} rows")

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        out = fn()
        took = time.perf_counter() - started
        print(f"{name:44} {took:7.3f} s  {size / 1e6 / took:8.1f} MB/s")
        return out

    series = timed(
        "unescape", lambda: series.to_frame().select(unescape_expr(pl.col("line")))["line"]
    )
    for rule_pass in rules.passes:

        def one_pass(p=rule_pass, text=series):  # type: ignore[no-untyped-def]
            return text.str.replace_all(p.pattern, p.replacement)

        series = timed(f"pass {rule_pass.name}", one_pass)
    source = rules.external
    if source is not None:
        mask = timed("source: key-word prefilter (one regex)",
                     lambda: source.keyword_rows(series))  # fmt: skip
        cand = series.filter(mask.fill_null(False))
        print(f"   candidate rows {len(cand):,} of {len(series):,} "
              f"({cand.str.len_bytes().sum() / 1e6:.1f} MB)")  # fmt: skip
        rows_of = timed("source: routing rows to rules (key words)", lambda: rs.route(cand, source))
        per_rule = []
        started = time.perf_counter()
        for index, rows in rows_of.items():
            t0 = time.perf_counter()
            cand.gather(rows).str.extract_all(source.rules[index].pattern)
            per_rule.append((time.perf_counter() - t0, len(rows), source.rules[index].id))
        took = time.perf_counter() - started
        print(
            f"{'source: rule regexes on their rows':44} {took:7.3f} s  "
            f"({len(rows_of)} rules reached, {sum(n for _, n, _ in per_rule):,} row visits)"
        )
        for t, n, rid in sorted(per_rule, reverse=True)[:8]:
            print(f"   {rid:40} {t:7.3f} s  {n:6,} rows")
        series = timed("source: whole pass (redact_source_series)",
                       lambda: rs.redact_source_series(series, source, REDACTED))  # fmt: skip
    if rules.context:
        timed("context pass", lambda: redact_context_series(series, rules.context, REDACTED))


def _redact_alone(archive: Path) -> dict[str, float]:
    from memkiln.io.rules import load_rules
    from memkiln.transforms.redact import redact_expr, secret_count_expr

    rules = load_rules()
    files = sorted(archive.rglob("*.jsonl"))
    total = 0
    took = 0.0
    left = 0
    batch: list[str] = []
    size = 0

    def run(lines: list[str]) -> tuple[float, int]:
        frame = pl.LazyFrame({"line": lines}, schema={"line": pl.String})
        started = time.perf_counter()
        out = frame.select(redact_expr(pl.col("line"), rules=rules)).collect(engine="streaming")
        elapsed = time.perf_counter() - started
        leftover = out.select(secret_count_expr(pl.col("line"), rules=rules).sum()).item()
        return elapsed, int(leftover)

    for path in files:
        data = path.read_text(encoding="utf-8")
        batch += data.splitlines()
        size += len(data.encode())
        total += len(data.encode())
        if size >= BATCH_BYTES:
            elapsed, leftover = run(batch)
            took, left, batch, size = took + elapsed, left + leftover, [], 0
    if batch:
        elapsed, leftover = run(batch)
        took, left = took + elapsed, left + leftover
    return {"mb": total / 1e6, "s": took, "mb_s": total / 1e6 / took, "leftover": left}


def _ingest(archive: Path) -> dict[str, float]:
    from memkiln.pipeline.ingest import ingest_archive
    from memkiln.settings import Settings

    total = sum(p.stat().st_size for p in archive.rglob("*.jsonl"))
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            archive=archive, db=Path(tmp) / "m.duckdb", backfill=True, min_rollout_idle_hours=0
        )
        started = time.perf_counter()
        summary = ingest_archive(settings)
        took = time.perf_counter() - started
    return {
        "mb": total / 1e6,
        "s": took,
        "mb_s": total / 1e6 / took,
        "secrets": float(sum(summary.hits.values())),
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(phase: str, variant: str, archive: Path) -> None:
    _use_variant(variant)
    started = _cpu()
    result = _redact_alone(archive) if phase == "redact" else _ingest(archive)
    # CPU-seconds of the whole phase (every thread, reading the files included): on a shared
    # machine a steadier measure than wall time
    result["cpu_s"] = _cpu() - started
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="synthetic archive size (MiB)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per phase and variant")
    parser.add_argument("--work", type=Path, default=HERE / "work")
    parser.add_argument("--profile", action="store_true", help="time each step, in process")
    parser.add_argument("--phase", choices=["redact", "ingest"], help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=["before", "after"], help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        child(args.phase, args.variant, args.archive)
        return 0

    archive = ensure_archive(args.work, args.mb).path
    print(f"archive {archive}")
    if args.profile:
        _profile(archive)
        return 0
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for phase in ("redact", "ingest"):
        for _ in range(args.repeat):
            for variant in ("before", "after"):
                out = subprocess.run(
                    [sys.executable, __file__, "--phase", phase, "--variant", variant,
                     "--archive", str(archive)],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results.setdefault((phase, variant), []).append(row)
                print(f"{phase:7} {variant:6} " + " ".join(f"{k}={v:,.1f}" for k, v in row.items()))
    print("\nphase   variant  best MB/s  runs")
    for (phase, variant), rows in results.items():
        best = max(r["mb_s"] for r in rows)
        runs = ", ".join(f"{r['mb_s']:.1f}" for r in rows)
        print(f"{phase:7} {variant:7} {best:9.1f}  {runs}")
    for phase in ("redact", "ingest"):
        before = max(r["mb_s"] for r in results[(phase, "before")])
        after = max(r["mb_s"] for r in results[(phase, "after")])
        cpu_before = min(r["cpu_s"] for r in results[(phase, "before")])
        cpu_after = min(r["cpu_s"] for r in results[(phase, "after")])
        print(
            f"{phase}: after/before = {after / before:.3f} (best MB/s); CPU-s {cpu_before:.1f} "
            f"-> {cpu_after:.1f} (least of the runs: {cpu_after / cpu_before - 1:+.1%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
