"""Which corpus sessions are over the stage-one budget, and how they are chunked.

For every rollout of ``../shared/corpus/rollouts`` (or the folder given), with the window
given (Codex's 272,000 tokens by default): whether its single message is over the budget
(before chunking: cut in the middle) and, if so, its chunks (``stage_one_chunks``), how many
start inside a turn, and how many are still cut (one item over the budget alone).

    python bench/chunks.py [--window 272000] [CORPUS_DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import duckdb
import polars as pl

from memkiln.io.archive import FileStat, read_file
from memkiln.io.loader import normalize_lines
from memkiln.io.rules import load_rules
from memkiln.transforms.chunks import turn_starts
from memkiln.transforms.filtering import filter_memory_items
from memkiln.transforms.lines import split_lines
from memkiln.transforms.render import stage_one_chunks, stage_one_inputs

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "rollouts"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--window", type=int, default=272_000)
    args = parser.parse_args()
    rules = load_rules()
    over = chunked = mid = cut = requests = 0
    files = sorted(p for p in args.corpus.rglob("*.jsonl*") if p.is_file())
    started = time.perf_counter()
    for path in files:
        st = os.stat(path)
        fb = read_file(FileStat(str(path), st.st_size, st.st_mtime_ns))
        with duckdb.connect(":memory:") as con:
            norm = normalize_lines(
                con,
                split_lines([(1, fb.data)]),
                files=pl.DataFrame({"fid": [1], "path": [str(path)]}),
                rules=rules,
            )
        if norm.rollouts.is_empty():
            continue
        rid = norm.rollouts["rollout_id"][0]
        items = norm.items.with_columns(
            seq=pl.int_range(pl.len(), dtype=pl.Int32), rollout_id=pl.lit(rid)
        )
        kept = filter_memory_items(items.lazy()).collect()
        session = pl.DataFrame(
            {"rollout_id": [rid], "path": [str(path)], "cwd": [None]},
            schema={"rollout_id": pl.String, "path": pl.String, "cwd": pl.String},
        )
        ((_, whole),) = stage_one_inputs(
            session, kept.lazy(), context_window=args.window, max_output_tokens=4000, rules=rules
        )
        if not whole.truncation.truncated:
            continue
        over += 1
        chunks = stage_one_chunks(
            kept,
            rollout_path=str(path),
            rollout_cwd=None,
            starts=turn_starts(kept),
            budget=whole.truncation.budget,
            context_window=args.window,
            max_output_tokens=4000,
            rules=rules,
        )
        n_mid = sum(c.mid_turn for c in chunks.chunks)
        n_cut = sum(p.truncation.truncated for p in chunks)
        chunked += len(chunks) > 1
        mid += n_mid
        cut += n_cut
        requests += len(chunks) + 1
        print(
            f"{path.name[:70]:70} {st.st_size / 1e6:6.2f} MB  turns {len(turn_starts(kept)):4}  "
            f"chunks {len(chunks):3}  mid-turn {n_mid:3}  cut {n_cut}"
        )
    elapsed = time.perf_counter() - started
    print(
        f"{len(files)} files, window {args.window:,}: {over} over the budget, {chunked} chunked "
        f"({requests} requests with the merges), {mid} chunks start mid-turn, {cut} chunks cut; "
        f"{elapsed:.1f} s"
    )


if __name__ == "__main__":
    main()
