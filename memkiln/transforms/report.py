"""Run summaries as text, and the exit code they mean (pure; no I/O).

A summary is a list of sections, each a title and ``(what, value)`` rows; the CLI prints it
as tables, a Prefect flow run publishes it as a markdown artifact and in its log.
"""

from __future__ import annotations

from collections.abc import Sequence

Row = tuple[str, str]
Section = tuple[str, Sequence[Row]]

#: Exit codes of the CLI.
EXIT_OK = 0
EXIT_FAILURES = 1  # some sessions or projects failed; the summary says which
EXIT_USAGE = 2  # a usage or configuration error
EXIT_LOCKED = 3  # the database is held by another run


def exit_code(*, sessions_failed: int, projects_failed: int) -> int:
    """0 when every session and project that was worked on ended well, else 1."""
    return EXIT_FAILURES if sessions_failed > 0 or projects_failed > 0 else EXIT_OK


def number(value: float) -> str:
    """``1,234`` for counts, ``0.0123`` for money and other fractions."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4f}"


def markdown(title: str, sections: Sequence[Section], notes: Sequence[str] = ()) -> str:
    """The summary as a markdown document: one table per section, then the notes."""
    lines = [f"# {title}", ""]
    for name, rows in sections:
        lines += [f"## {name}", "", "| what | count |", "|---|---:|"]
        lines += [f"| {_cell(what)} | {_cell(value)} |" for what, value in rows]
        lines.append("")
    if notes:
        lines += ["## notes", ""]
        lines += [f"- {_cell(note)}" for note in notes]
        lines.append("")
    return "\n".join(lines)


def plain_lines(sections: Sequence[Section], notes: Sequence[str] = ()) -> list[str]:
    """The summary as log lines: ``extract: model requests = 12``."""
    out = [f"{name}: {what.strip()} = {value}" for name, rows in sections for what, value in rows]
    return out + list(notes)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def took(seconds: float) -> str:
    """A duration for a person: ``4.2 s``, ``3 min 05 s``, ``2 h 01 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
