"""Finding a project from what a user types: any form of its git remote, its working
directory, its memory folder, or a unique part of its name.

Keys are stored normalized and redacted (``transforms.project``, ``normalize``), so the
argument goes through the same normalization and redaction before it is compared. The first
tier that matches anything decides; more than one project in that tier is ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

import polars as pl

from memkiln.transforms.project import normalize_git_remote
from memkiln.transforms.redact import RuleSet, redact_text

#: How a project can be named, tried in this order.
TIERS = ("key", "cwd", "folder", "name", "part of name", "part of key")
#: The tiers that name a project exactly (a directory is matched by these only).
EXACT_TIERS = ("key", "cwd", "folder")


@dataclass(frozen=True)
class Match:
    """The projects the first matching tier found (empty: none did)."""

    keys: list[str]
    tier: str | None


def key_forms(query: str, *, rules: RuleSet) -> list[str]:
    """The stored forms the argument may take: as a git remote (``https://host/a/b``,
    ``git@host:a/b.git``, with or without ``.git``), as a directory (with or without a
    trailing slash), and as typed; each redacted like the stored keys."""
    frame = pl.DataFrame({"q": [query]}).select(
        remote=normalize_git_remote(pl.col("q")),
        cwd=pl.col("q").str.strip_chars().str.replace(r"[/\\]+$", ""),
    )
    forms = [frame["remote"][0], frame["cwd"][0], query.strip()]
    out: list[str] = []
    for form in forms:
        if not form:
            continue
        for text in (form, redact_text(form, rules=rules)):
            if text not in out:
                out.append(text)
    return out


def project_name(key: pl.Expr) -> pl.Expr:
    """The last part of a project key: ``b`` for ``github.com/a/b`` and for ``/home/u/b``."""
    return key.str.replace(r"[/\\]+$", "").str.extract(r"([^/\\]+)$", 1)


def match_project(
    query: str, projects: pl.DataFrame, cwds: pl.DataFrame, *, rules: RuleSet
) -> Match:
    """Find ``query`` among ``projects`` (``project_key``, ``folder``) and the working
    directories of their sessions ``cwds`` (``project_key``, ``cwd``)."""
    forms = key_forms(query, rules=rules)
    needle = query.strip().rstrip("/\\").lower()
    clean_cwd = pl.col("cwd").str.strip_chars().str.replace(r"[/\\]+$", "")
    key = pl.col("project_key")
    name = project_name(key).str.to_lowercase()
    tiers: dict[str, pl.DataFrame] = {
        "key": projects.filter(key.is_in(forms)),
        "cwd": cwds.filter(clean_cwd.is_in(forms)),
        "folder": projects.filter(pl.col("folder").is_in(forms)),
        "name": projects.filter(name == needle),
        "part of name": projects.filter(name.str.contains(needle, literal=True)),
        "part of key": projects.filter(key.str.to_lowercase().str.contains(needle, literal=True)),
    }
    if not needle:
        return Match([], None)
    for tier in TIERS:
        keys = tiers[tier]["project_key"].unique().sort().to_list()
        if keys:
            return Match(keys, tier)
    return Match([], None)


def names_a_directory(query: str) -> bool:
    """Whether ``query`` is written as a path (``.``, ``..``, ``./x``, ``~/x``, ``/x``) rather
    than as a name that may also be a folder here (``shop``)."""
    q = query.strip()
    return q in (".", "..") or q.startswith(("./", "../", "~", "/", ".\\", "..\\"))


def match_directory(
    directory: str, projects: pl.DataFrame, cwds: pl.DataFrame, *, rules: RuleSet
) -> Match:
    """The project whose sessions ran in the absolute ``directory``, or in the nearest folder
    above it (``memkiln show .`` in ``~/src/shop/web`` finds the project of ``~/src/shop``);
    only exact matches count: ``.`` is the current directory, not a part of every key."""
    path = PurePath(directory)
    for folder in (path, *path.parents):
        found = match_project(str(folder), projects, cwds, rules=rules)
        if found.tier in EXACT_TIERS:
            return found
    return Match([], None)
