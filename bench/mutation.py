"""Mutation testing of memkiln's core with mutmut, one module at a time.

Each module is mutated in its own scratch copy of the repository (``--work``, default
``/tmp/memkiln-mutation/<module>``) with its own ``[tool.mutmut]`` section, so a module's
mutants run only against the tests scoped to it below (mutmut then runs, for each mutant,
only the tests that call the mutated function). Results are cached per module: a second
run resumes; ``--fresh`` starts over. ``--rerun-survivors`` re-tests only the mutants that
survived last time, against the current tests (the "after" figures of bench/RESULTS.md);
the other mutants keep their earlier verdict (saved in ``baseline.json``), since tests were
only added. Run it on a copy of the "before" directory to keep both.

Equivalent mutants (they cannot change behaviour) are listed with a reason in
``bench/mutation-equivalent.txt`` and left out of the score's denominator.

    nice -n 15 .venv/bin/python bench/mutation.py                  # every module
    nice -n 15 .venv/bin/python bench/mutation.py names redact     # some modules
    .venv/bin/python bench/mutation.py --report                    # the table only
    .venv/bin/python bench/mutation.py --survivors names           # list and show survivors
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
EQUIVALENT = REPO / "bench" / "mutation-equivalent.txt"

#: module -> (source file, tests scoped to it). Unit tests first; a flow test file is added
#: where the module's behaviour is only reachable through a flow.
MODULES: dict[str, tuple[str, list[str]]] = {
    "redact": (
        "memkiln/transforms/redact.py",
        [
            "tests/transforms/test_redact.py",
            "tests/transforms/test_redact_rules_files.py",
            # hits counted while redacting, the maintained rule source and the key-word
            # rule, and the items' and lines' redaction that calls them
            "tests/transforms/test_redact_engine.py",
            "tests/transforms/test_redact_counted.py",
            "tests/transforms/test_redact_source.py",
            "tests/transforms/test_redact_context.py",
            "tests/transforms/test_lines.py",
        ],
    ),
    "filtering": (
        "memkiln/transforms/filtering.py",
        ["tests/transforms/test_filtering.py", "tests/transforms/test_filtering_edges.py"],
    ),
    "selection": (
        "memkiln/transforms/selection.py",
        [
            "tests/transforms/test_selection.py",
            "tests/transforms/test_selection_edges.py",
            "tests/transforms/test_selection_backfill.py",
        ],
    ),
    # The unit tests on small texts (milliseconds each; PIECE_CHARS made small) and the
    # fast tests of the older files: those that encode 20,000-60,000-line texts (seconds
    # each, and every mutant of the cut runs them) are left to the suite.
    "tokens": (
        "memkiln/transforms/tokens.py",
        [
            "tests/transforms/test_tokens_units.py",
            "tests/transforms/test_tokens_cut.py",
            "tests/transforms/test_tokens_near_budget.py::test_a_text_that_fits_the_budget_in_tokens_is_never_cut",
            "tests/transforms/test_tokens_near_budget.py::test_a_text_just_over_the_budget_is_cut_to_fit_with_its_real_count",
            "tests/transforms/test_tokens.py::test_budget_is_95_percent_of_70_percent_of_the_window_with_a_fallback",
            "tests/transforms/test_tokens.py::test_the_budget_leaves_the_window_room_for_the_rest_of_the_request_with_a_floor",
            "tests/transforms/test_tokens.py::test_text_under_budget_is_returned_unchanged",
            "tests/transforms/test_tokens.py::test_a_text_that_fits_by_its_size_is_counted_only_when_asked",
            "tests/transforms/test_tokens.py::test_a_long_text_of_long_tokens_that_fits_is_not_cut",
        ],
    ),
    "names": (
        "memkiln/transforms/names.py",
        ["tests/transforms/test_consolidate.py", "tests/transforms/test_names_rules.py"],
    ),
    # Unit tests only: the flow tests of tests/cli/test_render_input.py cost about 10 s per
    # mutant; what they reach of this module (stage_one_inputs) has unit tests now.
    "render": (
        "memkiln/transforms/render.py",
        [
            "tests/transforms/test_render_units.py",
            "tests/transforms/test_render_lines.py",
            "tests/transforms/test_render_long.py",
            "tests/transforms/test_chunks.py",
        ],
    ),
    "consolidate": (
        "memkiln/transforms/consolidate.py",
        [
            "tests/transforms/test_consolidate.py",
            "tests/transforms/test_consolidate_layout.py",
            "tests/transforms/test_consolidate_files.py",
        ],
    ),
    "citations": (
        "memkiln/transforms/citations.py",
        ["tests/transforms/test_consolidate.py", "tests/transforms/test_citations_usage.py"],
    ),
    "project": (
        "memkiln/transforms/project.py",
        ["tests/transforms/test_project.py", "tests/transforms/test_project_keys.py"],
    ),
    "plan": (
        "memkiln/transforms/plan.py",
        ["tests/transforms/test_plan.py", "tests/transforms/test_plan_edges.py"],
    ),
    # the stage-one output's raw-memory format: its writer and consolidation's parser
    "raw_memory": (
        "memkiln/transforms/raw_memory.py",
        [
            "tests/transforms/test_raw_memory.py",
            "tests/transforms/test_consolidate.py",
            "tests/transforms/test_consolidate_layout.py",
        ],
    ),
    # The flow tests of tests/pipeline/test_consolidate.py also write memory files, but at about
    # a minute per surviving mutant on a shared 2-core machine; the writer's own tests run here.
    "memory_files": ("memkiln/io/memory_files.py", ["tests/io/test_memory_files_edges.py"]),
}

STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "caught by type check",
}


def mutmut_config(source: str, tests: list[str]) -> str:
    existing = [t for t in tests if (REPO / t.partition("::")[0]).exists()]
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["memkiln"]\n'
        f"only_mutate = {json.dumps([source])}\n"
        'also_copy = ["data"]\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(existing)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:timeout"]\n'
        # Polars' thread pool does not survive a fork from a process that ran the suite.
        'process_isolation = "forkserver"\n'
        # The machine is shared: a slow test is not a hung mutant; but a mutant that loops
        # (a cut that never advances) must not hold a worker for minutes. Wall limit:
        # (the tests' measured time + 10 s) x 1.5 (mutmut gives twice that in CPU time).
        "timeout_constant = 10.0\n"
        "timeout_multiplier = 1.5\n"
    )


def prepare(name: str, work: Path, *, fresh: bool) -> Path:
    source, tests = MODULES[name]
    wd = work / name
    if fresh and wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("memkiln", "tests", "data"):
        if (wd / part).exists():
            shutil.rmtree(wd / part)
        shutil.copytree(REPO / part, wd / part, ignore=ignore)
    text = (REPO / "pyproject.toml").read_text()
    (wd / "pyproject.toml").write_text(text + mutmut_config(source, tests))
    return wd


def results(name: str, work: Path) -> dict[str, str]:
    source, _ = MODULES[name]
    meta = work / name / "mutants" / (source + ".meta")
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    out = {
        k: STATUS.get(v, "suspicious" if v is not None else "not checked") for k, v in codes.items()
    }
    # After --rerun-survivors: mutmut forgets every verdict when the test selection changes;
    # a mutant the earlier tests killed is still killed (tests were only added), so its
    # earlier verdict stands when it was not re-run.
    baseline = work / name / "baseline.json"
    if baseline.exists():
        for key, status in json.loads(baseline.read_text()).items():
            if out.get(key, "not checked") == "not checked":
                out[key] = status
    return out


def equivalent() -> dict[str, str]:
    out = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, reason = line.partition(" ")
                out[key] = reason.strip()
    return out


def score_row(name: str, work: Path) -> tuple[str, int, int, int, int, int, str]:
    """``module, mutants, killed, not killed, equivalent, not checked, score``; the score is
    killed / (checked - equivalent)."""
    res = results(name, work)
    eq = equivalent()
    counts = Counter(res.values())
    killed = counts["killed"] + counts["timeout"] + counts["caught by type check"]
    unchecked = counts["not checked"]
    n_eq = sum(1 for k, v in res.items() if k in eq and v not in ("killed", "timeout"))
    live = len(res) - unchecked - n_eq
    pct = f"{100 * killed / live:.1f}%" if live else "-"
    return name, len(res), killed, live - killed, n_eq, unchecked, pct


def report(names: list[str], work: Path) -> None:
    print("| module | mutants | killed | not killed | equivalent | not checked | score |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    tot = [0, 0, 0, 0, 0]
    for name in names:
        row = score_row(name, work)
        if row[1] == 0:
            continue
        for i in range(5):
            tot[i] += row[i + 1]  # type: ignore[operator]
        print("| " + " | ".join(str(c) for c in row) + " |")
    live = tot[1] + tot[2]
    pct = f"{100 * tot[1] / live:.1f}%" if live else "-"
    print(f"| total | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | {tot[4]} | {pct} |")


def survivors(name: str, work: Path) -> list[str]:
    eq = equivalent()
    alive = ("survived", "no tests")
    return sorted(
        (k for k, v in results(name, work).items() if v in alive and k not in eq),
        key=lambda k: (k.rsplit("__mutmut_", 1)[0], int(k.rsplit("_", 1)[1])),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("modules", nargs="*", help=f"default: all of {', '.join(MODULES)}")
    ap.add_argument("--work", type=Path, default=Path("/tmp/memkiln-mutation"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--fresh", action="store_true", help="forget earlier results")
    ap.add_argument("--rerun-survivors", action="store_true")
    ap.add_argument("--report", action="store_true", help="print the table, run nothing")
    ap.add_argument("--survivors", action="store_true", help="show surviving mutants' diffs")
    args = ap.parse_args()
    names = args.modules or list(MODULES)
    unknown = set(names) - set(MODULES)
    if unknown:
        ap.error(f"unknown modules: {', '.join(sorted(unknown))}")
    if args.survivors:
        for name in names:
            for key in survivors(name, args.work):
                subprocess.run([MUTMUT, "show", key], cwd=args.work / name, check=False)
        return 0
    if not args.report:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        for name in names:
            keys = survivors(name, args.work) if args.rerun_survivors else []
            if args.rerun_survivors and not keys:
                continue
            if args.rerun_survivors:
                before = results(name, args.work)
                (args.work / name / "baseline.json").write_text(json.dumps(before, indent=0))
            wd = prepare(name, args.work, fresh=args.fresh)
            cmd = [MUTMUT, "run", "--max-children", str(args.workers), *keys]
            print(
                f"== {name}: {' '.join(map(str, cmd[:4]))} ({len(keys) or 'all'} mutants)",
                flush=True,
            )
            started = time.monotonic()
            with open(wd / "mutmut.log", "w") as log:
                subprocess.run(cmd, cwd=wd, env=env, stdout=log, stderr=subprocess.STDOUT)
            elapsed = time.monotonic() - started
            load = os.getloadavg()[1]
            (wd / "elapsed.txt").write_text(f"{elapsed:.0f} s, load average {load:.1f}\n")
            print(f"   {name}: {elapsed:.0f} s, 5-minute load average {load:.1f}", flush=True)
    report(names, args.work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
