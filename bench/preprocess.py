"""Benchmark: filter + redact + render (the stage-one input) over a synthetic Codex archive.

Three measurements from one run, each phase in its own child process (for a clean peak RSS):

- memkiln: every file read, split, redacted, parsed, normalized, filtered, rendered
  (redacted again) and budgeted into one stage-one message per session, in batches;
- redaction alone: the full rule set over every line (Polars, streaming engine), then a
  second pass counting matches of the full rule set, which must find zero;
- the plain-Python baseline: per line ``json.loads``, the same rules with ``re``, Codex's
  filtering rules as dict checks, ``json.dumps`` of the kept items, on a subset.

    python bench/preprocess.py [--mb 500] [--baseline-mb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from ingest import python_rules  # noqa: E402  (the rule set translated to Python's re)
from synth import ensure_archive  # noqa: E402

BATCH_BYTES = 64 * 1024 * 1024


def _files(archive: Path) -> list[Path]:
    return sorted(archive.rglob("*.jsonl"))


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_memkiln(archive: Path) -> dict[str, float]:
    import duckdb

    from memkiln.io.loader import normalize_chunks
    from memkiln.io.rules import load_rules
    from memkiln.transforms.filtering import filter_memory_items
    from memkiln.transforms.prompts import build_stage_one_input
    from memkiln.transforms.render import render_items

    rules = load_rules()
    files = _files(archive)
    started = time.perf_counter()
    total = sessions = truncated = 0
    with duckdb.connect(":memory:") as con:
        batch: list[tuple[int, bytes]] = []
        size = 0

        def run(batch: list[tuple[int, bytes]]) -> None:
            nonlocal sessions, truncated
            paths = pl.DataFrame(
                {"fid": [f for f, _ in batch], "path": [str(files[f]) for f, _ in batch]}
            )
            norm = normalize_chunks(con, batch, files=paths, rules=rules)
            items = norm.items.join(
                norm.rollouts.select("fid", "rollout_id", "cwd", "path"), on="fid"
            )
            kept = filter_memory_items(items.lazy())
            contents = (
                render_items(kept, rules=rules)
                .with_columns(seq=pl.int_range(pl.len()).over("rollout_id"))
                .group_by("rollout_id", "path", "cwd")
                .agg(contents=pl.col("item_json").sort_by("seq").str.join("\n"))
                .collect()
            )
            for _, path, cwd, body in contents.iter_rows():
                prompt = build_stage_one_input(
                    rollout_path=path, rollout_cwd=cwd, rollout_contents=body, context_window=None
                )
                sessions += 1
                truncated += prompt.truncation.truncated

        for fid, path in enumerate(files):
            data = path.read_bytes()
            total += len(data)
            batch.append((fid, data))
            size += len(data)
            if size >= BATCH_BYTES:
                run(batch)
                batch, size = [], 0
        if batch:
            run(batch)
    elapsed = time.perf_counter() - started
    return {"bytes": total, "seconds": elapsed, "sessions": sessions, "truncated": truncated,
            "rss_mb": _maxrss_mb()}  # fmt: skip


def phase_redact(archive: Path) -> dict[str, float]:
    from memkiln.io.rules import load_rules
    from memkiln.transforms.redact import redact_expr, secret_count_expr

    rules = load_rules()
    files = [str(p) for p in _files(archive)]
    total = sum(os.path.getsize(p) for p in files)
    lines = pl.concat([pl.scan_lines(p) for p in files]).collect()  # loading is not timed
    column = lines.columns[0]
    started = time.perf_counter()
    redacted = (
        lines.lazy()
        .select(line=redact_expr(pl.col(column), rules=rules))
        .collect(engine="streaming")
    )
    elapsed = time.perf_counter() - started
    before = (
        lines.lazy()
        .select(secret_count_expr(pl.col(column), rules=rules).sum())
        .collect(engine="streaming")
        .item()
    )
    after = (
        redacted.lazy()
        .select(secret_count_expr(pl.col("line"), rules=rules).sum())
        .collect(engine="streaming")
        .item()
    )
    return {"bytes": total, "seconds": elapsed, "matches_before": before, "matches_after": after,
            "rss_mb": _maxrss_mb()}  # fmt: skip


KEPT_ITEMS = {
    "message", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "local_shell_call", "web_search_call", "tool_search_call",
    "tool_search_output",
}  # fmt: skip
INJECTED = re.compile(
    r"^(?:# agents\.md instructions.*</instructions>|<skill>.*</skill>)$", re.S | re.I
)


def phase_baseline(archive: Path, limit_mb: float) -> dict[str, float]:
    rules, used, _ = python_rules()
    total = 0
    out_chars = 0
    started = time.perf_counter()
    for path in _files(archive):
        if total >= limit_mb * 1_000_000:
            break
        kept = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                total += len(line.encode("utf-8"))
                for _, pattern, replacement in rules:
                    line = pattern.sub(replacement, line)
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                payload = obj.get("payload") or {}
                if obj.get("type") != "response_item" or payload.get("type") not in KEPT_ITEMS:
                    continue
                if payload.get("type") == "message":
                    if payload.get("role") == "developer":
                        continue
                    role = payload.get("role")
                    parts = [
                        p
                        for p in payload.get("content") or []
                        if role != "user" or not INJECTED.match(str(p.get("text", "")).strip())
                    ]
                    if not parts:
                        continue
                    payload = {**payload, "content": parts}
                kept.append(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
        out_chars += len("\n".join(kept))
    elapsed = time.perf_counter() - started
    return {"bytes": total, "seconds": elapsed, "rules": used, "rss_mb": _maxrss_mb()}


def child(phase: str, archive: Path, **extra: object) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--phase", phase, "--archive", str(archive)]
    for k, v in extra.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=500, help="synthetic archive size")
    parser.add_argument("--baseline-mb", type=float, default=50, help="baseline runs on a subset")
    parser.add_argument("--work", type=Path, default=HERE / "work")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        result = {
            "memkiln": lambda: phase_memkiln(args.archive),
            "redact": lambda: phase_redact(args.archive),
            "baseline": lambda: phase_baseline(args.archive, args.baseline_mb),
        }[args.phase]()
        print(json.dumps(result))
        return 0
    archive = ensure_archive(args.work, args.mb).path
    mem = child("memkiln", archive)
    red = child("redact", archive)
    base = child("baseline", archive, baseline_mb=args.baseline_mb)
    rate = {
        k: v["bytes"] / v["seconds"] / 1e6
        for k, v in (("memkiln", mem), ("redact", red), ("baseline", base))
    }
    print(f"archive: {archive} ({mem['bytes'] / 1e6:,.0f} MB, {mem['sessions']} sessions, "
          f"{mem['truncated']} cut to the 150k-token budget); {os.cpu_count()} cores")  # fmt: skip
    print(f"{'phase':<34} {'MB':>8} {'s':>8} {'MB/s':>8} {'peak RSS MB':>12} {'x baseline':>11}")
    rows = [
        ("memkiln filter+redact+render", mem),
        ("redaction alone (full rule set)", red),
        (f"plain Python ({base['rules']} rules, subset)", base),
    ]
    keys = ["memkiln", "redact", "baseline"]
    for (name, r), key in zip(rows, keys, strict=True):
        print(f"{name:<34} {r['bytes'] / 1e6:>8.0f} {r['seconds']:>8.2f} {rate[key]:>8.1f} "
              f"{r['rss_mb']:>12.0f} {rate[key] / rate['baseline']:>11.1f}")  # fmt: skip
    print(f"matches of the full rule set: {red['matches_before']} before redaction, "
          f"{red['matches_after']} after (must be 0)")  # fmt: skip
    print(f"targets: memkiln >= 20x baseline: {rate['memkiln'] / rate['baseline']:.1f}x; "
          f"redaction >= 200 MB/s: {rate['redact']:.0f} MB/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
