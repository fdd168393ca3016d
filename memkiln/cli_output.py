"""What the command line prints: summaries as tables, a dry run's estimate, a run's
counters as JSON, errors as one line, at a width that never cuts a value."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from memkiln.settings import AS_GIVEN, Settings, Source, masked
from memkiln.transforms.report import Section, took

if TYPE_CHECKING:
    from memkiln.transforms.summaries import IngestSummary

#: Lines of what an ingest set aside shown after its summary (the rest are counted).
SET_ASIDE_SHOWN = 20


def print_set_aside(summary: IngestSummary) -> None:
    """One line per file and reason of what the ingest quarantined."""
    console = Console(soft_wrap=True)
    for line in summary.set_aside[:SET_ASIDE_SHOWN]:
        console.print(f"set aside: {line}", markup=False, highlight=False)
    if len(summary.set_aside) > SET_ASIDE_SHOWN:
        console.print(
            f"set aside: {len(summary.set_aside) - SET_ASIDE_SHOWN} more "
            "(view v_quarantine_by_reason)",
            markup=False,
            highlight=False,
        )


def print_sections(
    sections: Sequence[Section], notes: Sequence[str] = (), caption: str = ""
) -> None:
    console = stdout_console()
    for title, rows in sections:
        table = Table(title=title, caption=caption, show_header=False)
        table.add_column("what", style="bold")
        table.add_column("count", justify="right")
        for what, value in rows:
            table.add_row(what, value)
        console.print(table)
    for note in notes:
        console.print(styled("attention", note), soft_wrap=True)
    console.print(f"took {took(elapsed())}", highlight=False, markup=False)


#: When this command started (``run_cli``), for the time every summary says it took.
COMMAND_STARTED: list[float] = []


def elapsed() -> float:
    """Seconds since the command started."""
    import time

    return time.monotonic() - COMMAND_STARTED[-1] if COMMAND_STARTED else 0.0


def print_counters(summary: Any, code: int) -> int:
    """A run's counters (as in ``runs``) and why it stopped early, as one JSON object."""
    extract = getattr(summary, "extract", summary)
    out = summary.counters() | {
        "run_id": summary.run_id,
        "stopped": extract.stopped,
        "budget_reached": extract.budget_reached,
        "seconds": round(elapsed(), 1),
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return code


def print_estimate(estimate: Any, *, as_json: bool, run_id: str) -> bool:
    """Print a dry run's estimate (a table, or one JSON object); False when not a dry run."""
    if estimate is None:
        return False
    if as_json:
        sys.stdout.write(json.dumps(estimate.as_json() | {"run_id": run_id}) + "\n")
    else:
        from memkiln.transforms.estimate import estimate_section

        print_sections([estimate_section(estimate)], caption=f"run {run_id[:12]}")
    return True


def print_steps(summary: Any) -> None:
    """A dry run's list: per target, each file it would create, change, remove or leave."""
    table = Table(title="what publish would do", show_header=True)
    for name in ("agent", "action", "bytes", "file"):
        table.add_column(
            name,
            justify="right" if name == "bytes" else "left",
            overflow="fold" if name == "file" else "ellipsis",
        )
    verbs = {"keep": "leave (unchanged)", "skip": "leave alone"}
    for step in summary.steps:
        table.add_row(
            step.target, verbs.get(step.action, step.action), f"{step.size:,}", Text(step.path)
        )
    Console().print(table)


def styled(label: str, message: str) -> Text:
    """``label: message`` for the terminal, the label in bold red; the message (it can hold
    paths and values from sessions) is shown as it is: never read as Rich markup, on one
    line, without control characters or terminal escapes."""
    from memkiln.transforms.text import one_line

    return Text.assemble((f"{label}:", "bold red"), " ", one_line(message, 10_000))


#: Width of output that goes to no terminal (a pipe, a file, cron's mail): tables as wide as
#: their values, so nothing is cut (a terminal's own width applies on a terminal).
UNCUT_WIDTH = 10_000
#: Width of ``--help`` that goes to no terminal: wide enough that no setting's variable name
#: or default is cut (``[MEMKILN_MIN_ROLLOUT_IDLE_HOURS; …``); help wraps, it is never cut.
HELP_WIDTH = 160


def stdout_console() -> Console:
    """A console on stdout: the terminal's width there, and elsewhere (unless ``COLUMNS``
    says otherwise) as wide as the output, so a value is never cut to fit 80 columns."""
    console = Console()
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=UNCUT_WIDTH)


def help_width() -> None:
    """``--help`` printed to no terminal is as wide as ``HELP_WIDTH`` (typer's help reads
    ``TERMINAL_WIDTH``, else the terminal's width, else 80)."""
    from typer import rich_utils

    if rich_utils.MAX_WIDTH is None and not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        rich_utils.MAX_WIDTH = HELP_WIDTH


def fail(message: str, code: int) -> int:
    Console(stderr=True).print(styled("error", message), soft_wrap=True)
    return code


def print_config(
    effective: Settings, origins: dict[str, Source], path: Path | None, *, as_json: bool
) -> None:
    """``memkiln config``: each setting, its value and where it came from."""
    values = effective.model_dump(mode="json", context=AS_GIVEN)
    if as_json:
        shown = {name: {"value": values[name], "source": str(src)} for name, src in origins.items()}
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return
    table = Table(title="memkiln settings", show_header=True)
    table.add_column("setting", style="bold")
    table.add_column("value")
    table.add_column("from")
    for name, src in origins.items():
        table.add_row(name, masked(name, getattr(effective, name)), str(src))
    key = os.environ.get("OPENAI_API_KEY")
    table.add_row("(api key)", "****" if key else "not set", "environment OPENAI_API_KEY")
    console = stdout_console()
    console.print(table)
    config_file = path.resolve() if path else "none"
    console.print(f"config file: {config_file}", highlight=False, markup=False)
    api_url = os.environ.get("PREFECT_API_URL") or "none (ephemeral server per run)"
    console.print(
        f"Prefect: home {os.environ['PREFECT_HOME']}, API {api_url}", highlight=False, markup=False
    )


def print_stage_one_input(result: Any, facts: dict[str, Any], *, show_system: bool) -> None:
    """``memkiln render-input``: the message on stdout; its tokens and truncation on stderr."""
    if show_system:
        sys.stdout.write(result.system)
        sys.stdout.write("\n")
    sys.stdout.write(result.user)
    sys.stdout.flush()
    t = result.truncation
    err = Console(stderr=True)
    err.print(
        f"{facts['format']} rollout {facts['rollout_id']}: contents {t.tokens_before:,} tokens, "
        f"budget {t.budget:,}; "
        + (
            f"truncated in the middle, {t.removed:,} tokens removed, {t.tokens_after:,} kept"
            if t.truncated
            else "not truncated"
        )
        + f"; user message {result.user_tokens:,} tokens (o200k_base)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if facts["quarantined_lines"]:
        err.print(f"{facts['quarantined_lines']} unreadable line(s) were skipped", highlight=False)


def print_memory_files(out: Path) -> None:
    """Where the memory files are: the index under ``out``."""
    stdout_console().print(f"memory files: {out}/INDEX.md", highlight=False, markup=False)
