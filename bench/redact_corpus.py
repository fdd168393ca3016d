"""How much of the shared session corpus redaction changes: the rule set of a given commit
(before) beside the working tree's (after), on every raw line of ../shared/corpus/rollouts.

Secret bytes = bytes replaced by markers: len(before) - len(after) + markers added x 17.

    .venv/bin/python bench/redact_corpus.py [--before a779a86]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import polars as pl

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import REDACTED, RuleSet, redact_expr, rule_hit_counts

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "corpus" / "rollouts"


def measure(lines: pl.Series, rules: RuleSet) -> dict[str, float]:
    frame = pl.DataFrame({"line": lines})
    out = frame.with_columns(red=redact_expr(pl.col("line"), rules=rules))
    changed = out.filter(pl.col("red") != pl.col("line"))
    added = (
        changed["red"].str.count_matches(REDACTED, literal=True).sum()
        - changed["line"].str.count_matches(REDACTED, literal=True).sum()
    )
    replaced = (
        changed["line"].str.len_bytes().sum() - changed["red"].str.len_bytes().sum()
        + added * len(REDACTED)
    )  # fmt: skip
    hits = Counter(
        dict(rule_hit_counts(changed.lazy(), column="line", rules=rules).collect().iter_rows())
    )
    total = frame["line"].str.len_bytes().sum()
    return {"bytes": total, "lines_changed": len(changed), "replaced": replaced,
            "share": replaced / total, "hits": hits}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="a779a86", help="commit of the old rule set")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    old = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.before}:memkiln/transforms/secret_rules.toml"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(old)
    lines: list[str] = []
    for path in sorted(CORPUS.rglob("*.jsonl")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    series = pl.Series("line", lines, dtype=pl.String)
    for name, rules in [(f"before ({args.before})", load_rules(Path(f.name))),
                        ("after", load_rules())]:  # fmt: skip
        m = measure(series, rules)
        print(f"{name}: {m['bytes'] / 1e6:.1f} MB, {len(series):,} lines; lines changed "
              f"{m['lines_changed']:,}; secret bytes replaced {m['replaced']:,} "
              f"({100 * m['share']:.4f}% of the corpus)")  # fmt: skip
        print("   hits: " + ", ".join(f"{k} {v}" for k, v in m["hits"].most_common()))
    Path(f.name).unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
