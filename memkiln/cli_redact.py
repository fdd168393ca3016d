"""The console script's entry point: ``memkiln redact FILE...`` starts without the CLI.

``memkiln redact`` is a filter (``some-command | memkiln redact``), run often and on small
inputs, where importing the whole command line (typer, rich, the pydantic settings and every
command's options: about 0.15 CPU-s) costs as much as redacting megabytes. Its plain form (file
names, ``-`` and ``--stats``, every file there) runs here with only what redaction needs;
everything else (``--help``, an unknown option, a missing file, every other command) goes to
:func:`memkiln.cli.main`, which says and does the same as ever. The output, the hit counts
on stderr and the exit codes are those of ``memkiln.cli`` (a test compares both).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "plain_redact"]


def plain_redact(args: Sequence[str]) -> tuple[list[Path], bool] | None:
    """The files and ``--stats`` of a plain ``redact`` command line (after ``redact``), or
    None when the full CLI must read it (an option, a file that is not there)."""
    files: list[Path] = []
    stats = False
    for arg in args:
        if arg == "--stats":
            stats = True
        elif arg == "-":
            files.append(Path(arg))
        elif arg.startswith("-") or not Path(arg).is_file():
            return None
        else:
            files.append(Path(arg))
    return files, stats


def run_redact(files: Sequence[Path], *, stats: bool) -> int:
    """``memkiln redact`` as :func:`memkiln.cli.redact` runs it; the exit code."""
    from memkiln.cli_env import allocator_defaults

    allocator_defaults()  # before Polars is imported
    from memkiln.errors import Interrupted, MemkilnError
    from memkiln.io.redact_stream import redact_streams
    from memkiln.io.rules import load_rules
    from memkiln.io.signals import interruptible, stopped_line

    try:
        with interruptible():
            hits = redact_streams(
                files, stdin=sys.stdin.buffer, stdout=sys.stdout.buffer, rules=load_rules()
            )
    except Interrupted as exc:
        sys.stderr.write(stopped_line(exc) + "\n")
        return 128 + exc.signum
    except MemkilnError as exc:
        from memkiln.cli_output import fail
        from memkiln.transforms.report import EXIT_USAGE

        return fail(str(exc), EXIT_USAGE)
    if stats:
        lines = [f"{n:8,}  {rule_id}" for rule_id, n in hits.most_common()]
        lines.append(f"{sum(hits.values()):8,}  secrets redacted")
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    return 0


def main() -> None:
    """Console-script entry point."""
    args = sys.argv[1:]
    plain = plain_redact(args[1:]) if args[:1] == ["redact"] else None
    if plain is not None:
        sys.exit(run_redact(plain[0], stats=plain[1]))
    from memkiln.cli import main as cli_main

    cli_main()
