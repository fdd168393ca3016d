"""The project a session belongs to: its normalized git remote, else its working directory."""

from __future__ import annotations

import polars as pl

#: Git hosts whose owner and repository names ignore case (``github.com/Acme/Widget`` is
#: ``github.com/acme/widget``): their whole key is lower-cased.
CASE_INSENSITIVE_HOSTS = ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org")


def normalize_git_remote(expr: pl.Expr) -> pl.Expr:
    """``git@github.com:a/b.git``, ``https://user:pw@GitHub.com/a/b/`` and
    ``ssh://git@github.com:22/a/b.git`` all become ``github.com/a/b``.

    Credentials and ports are dropped, the host is lower-cased (the whole remote on a host
    that ignores case, ``CASE_INSENSITIVE_HOSTS``), a trailing ``.git`` and slashes are
    removed, and the text is put in Unicode NFC. Empty or blank input gives null.
    """
    url = expr.str.strip_chars()
    has_scheme = url.str.contains(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
    with_scheme = (
        url.str.replace(r"^[A-Za-z][A-Za-z0-9+.\-]*://", "")
        .str.replace(r"^[^@/]*@", "")
        .str.replace(r"^([^/:]+):[0-9]+(/|$)", "${1}${2}")
    )
    scp_like = url.str.replace(r"^[^@/]*@", "").str.replace(r"^([^/:]+):/?", "${1}/")
    bare = pl.when(has_scheme).then(with_scheme).otherwise(scp_like)
    trimmed = bare.str.replace(r"(?:\.git)?/*$", "")
    host = trimmed.str.extract(r"^([^/]*)", 1).str.to_lowercase()
    rest = trimmed.str.extract(r"^[^/]*(/.*)?$", 1).fill_null("")
    rest = pl.when(host.is_in(CASE_INSENSITIVE_HOSTS)).then(rest.str.to_lowercase()).otherwise(rest)
    out = pl.concat_str([host, rest]).str.normalize("NFC")
    return pl.when(out.str.len_chars() > 0).then(out).otherwise(None)


def project_key(*, remote: pl.Expr, cwd: pl.Expr) -> pl.Expr:
    """The normalized git remote when there is one, else the working directory (in Unicode
    NFC: a macOS path written decomposed is the same directory)."""
    cleaned_cwd = cwd.str.strip_chars().str.replace(r"[/\\]+$", "").str.normalize("NFC")
    cleaned_cwd = pl.when(cleaned_cwd.str.len_chars() > 0).then(cleaned_cwd).otherwise(None)
    return pl.coalesce(normalize_git_remote(remote), cleaned_cwd)
