"""``memkiln redact FILE`` against ``kingfisher scan`` on the same files: CPU seconds and peak
memory of each whole process, as ``/usr/bin/time -v`` reports them, runs alternating.

    .venv/bin/python bench/redact_cli.py FILE [FILE ...] [--repeat 3]

Each file is redacted to /dev/null by the ``memkiln`` console script of this environment, and
scanned by ``kingfisher scan --no-validate`` (kingfisher-bin, ``pip install kingfisher-bin``)
at its default jobs and with ``-j 1`` (one scan thread); an empty file first gives each one's
start-up. Printed: per file and tool, the CPU (user + system) of each run, the median, and the
highest peak RSS.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TIME = "/usr/bin/time"


def measure(command: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MB of ``command``, output dropped."""
    done = subprocess.run(
        [TIME, "-v", *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if done.returncode not in (0, 200, 205):  # kingfisher exits 200/205 when it finds secrets
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr[-800:]}")
    fields = dict(re.findall(r"^\s*([^:\n]+):\s*(\S+)\s*$", done.stderr, flags=re.M))
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return cpu, int(fields["Maximum resident set size (kbytes)"]) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    here = Path(sys.executable).parent
    memkiln = str(here / "memkiln")
    kingfisher = shutil.which("kingfisher", path=str(here)) or shutil.which("kingfisher")
    tools: dict[str, list[str]] = {"memkiln redact": [memkiln, "redact"]}
    if kingfisher:
        scan = [kingfisher, "scan", "--no-validate", "--no-update-check"]
        tools |= {"kingfisher (default jobs)": scan, "kingfisher -j 1": [*scan, "-j", "1"]}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.jsonl"
        empty.touch()
        print(f"{'file':<28} {'tool':<26} {'CPU-s runs':<22} {'median':>7} {'peak RSS MB':>12}")
        for path in [empty, *args.files]:
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
            for _ in range(args.repeat):
                for name, command in tools.items():
                    runs[name].append(measure([*command, str(path)]))
            size = "empty" if path == empty else f"{path.name} ({path.stat().st_size >> 20} MiB)"
            for name, got in runs.items():
                cpus = [c for c, _ in got]
                shown = ", ".join(f"{c:.2f}" for c in cpus)
                print(
                    f"{size:<28} {name:<26} {shown:<22} {statistics.median(cpus):>7.2f} "
                    f"{max(r for _, r in got):>12.0f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
