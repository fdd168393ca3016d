"""What a memory may recommend, and what it may never carry: the risk filter and the
copied-instruction filter, applied to every backend's output before a memory file is written.

- **Risky commands** (``risk_reason``): piping a download into a shell, force pushes, history
  rewrites, disabling checks or protections, ``rm -rf`` outside the project, credentials on
  the command line, and commands that reach hosts other than well-known package registries.
  A memory line that recommends one is dropped, whoever wrote it.
- **Imperative text** (``is_imperative``): a sentence that tells a reader what to do
  ("always run …", "never open …", "we decided …", "ignore previous instructions"). Such a
  sentence copied out of a tool's output, a fetched page, a file or an injected text is an
  instruction nobody typed: a memory line holding one (``untrusted_sentences`` collects
  them from the sessions' non-user items) is dropped.

Pure; no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import polars as pl

#: Hosts a command may reach and still be recommended: package registries and their CDNs.
REGISTRY_HOSTS = (
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "pypi.org",
    "files.pythonhosted.org",
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "proxy.golang.org",
    "rubygems.org",
    "repo.maven.apache.org",
    "repo1.maven.org",
    "plugins.gradle.org",
    "api.nuget.org",
    "registry.hub.docker.com",
    "deb.debian.org",
    "localhost",
    "127.0.0.1",
)

#: (reason, pattern) pairs; the first that matches names the risk.
RISKS: tuple[tuple[str, str], ...] = (
    (
        "download_piped_to_shell",
        r"(?i)\b(?:curl|wget|iwr|irm|invoke-webrequest|invoke-restmethod|fetch)\b[^\n|]*\|\s*"
        r"(?:sudo\s+)?(?:ba|z|da|k|fi)?sh\b|\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?"
        r"(?:python3?|node|perl|ruby|iex|invoke-expression)\b|"
        r"(?:ba|z)?sh\s+(?:-c\s+)?[\"']?\$\((?:curl|wget)\b|\biex\s*\(",
    ),
    (
        "force_push",
        r"(?i)\bgit\s+push\b[^\n]*?(?:\s--force(?:-with-lease)?\b|\s-f\b|\s-[a-z]*f[a-z]*\b|"
        r"\s\+[\w/.-]+|\s--mirror\b|\s--delete\b)",
    ),
    (
        "history_rewrite",
        r"(?i)\bgit\s+(?:filter-branch|filter-repo|rebase\b|reset\s+--hard|commit\s+[^\n]*--amend|"
        r"reflog\s+expire|gc\s+--prune|update-ref\s+-d|checkout\s+--orphan|branch\s+-D|"
        r"clean\s+-[a-z]*f)",
    ),
    (
        "checks_disabled",
        r"(?i)(?:--no-verify\b|--no-gpg-sign\b|core\.hooksPath|HUSKY=0|SKIP_CHECKS?=|"
        r"-DskipTests\b|--skip-tests?\b|--dangerously-skip-permissions\b|"
        r"--dangerously-bypass-approvals\w*|--yolo\b|--disable-(?:checks|verification)\b|"
        r"\bchmod\s+(?:-R\s+)?0?777\b|\bsetenforce\s+0\b|--insecure\b|"
        r"\bgit\s+config\b[^\n]*\b(?:http\.sslVerify\s+false|protection)|"
        r"\bgh\s+api\b[^\n]*protection|--allow-unauthenticated\b|--no-check-certificate\b|"
        r"--trusted-host\b|NODE_TLS_REJECT_UNAUTHORIZED=0|PYTHONHTTPSVERIFY=0|\bsudo\b)",
    ),
    (
        "rm_outside_project",
        r"(?i)\brm\s+(?:-[a-z]*[rf][a-z]*\s+)+(?:--\s+)?(?:/|~|\$HOME|\$\{HOME\}|\.\./|\*(?:\s|$))",
    ),
    (
        "credential_on_command_line",
        r"(?i)\[REDACTED_SECRET\]|(?:--password|--passwd|--token|--api-key|--secret)[= ]\S|"
        r"\b(?:mysql|mysqldump|psql|sshpass|docker\s+login)\b[^\n]*\s-p\s?\S|"
        r"\bAuthorization:\s*\S|\b\w*(?:TOKEN|SECRET|PASSWORD|API_KEY|APIKEY)\w*=\S|"
        r"https?://[^\s/:@]+:[^\s/@]+@",
    ),
)

#: A URL or an ``scp``/``ssh``-style host in a command.
URL_HOST = r"(?i)\b(?:https?|ftp|wss?)://([^\s/:'\"`)]+)"
NETWORK_PROGRAM = r"(?i)(?:^|[\s;&|(])(?:ssh|scp|rsync|nc|ncat|telnet|ftp|sftp)\s"

#: Words that make a sentence tell its reader what to do, or claim a standing decision.
IMPERATIVE = (
    r"(?i)(?:\b(?:always|never|must|mustn't|should|shouldn't|do not|don't|make sure|"
    r"we decided|decided to|from now on|going forward|you are|ignore (?:all |any )?"
    r"(?:previous|prior|above)|disregard|instructions?|all contributors|everyone|required|"
    r"important|remember to|be sure to)\b|^(?:please\s+)?(?:run|use|add|open|push|install|"
    r"execute|delete|remove|set|disable|enable|commit|merge|skip|pipe|download|curl|wget)\b)"
)
#: Words of a sentence kept when sentences are compared (lower case letters and digits).
WORD = r"[a-z0-9]+"
#: An untrusted sentence counts when it has at least this many words.
MIN_SENTENCE_WORDS = 5


#: Risks also looked for in prose (outside code spans): the unambiguous ones.
PROSE_RISKS = ("download_piped_to_shell", "force_push")
#: A code span of a memory line.
CODE_SPAN = r"`([^`\n]+)`"


def risk_reason(text: str) -> str | None:
    """Why ``text`` (a command) must not be recommended, or None."""
    for reason, pattern in RISKS:
        if re.search(pattern, text):
            return reason
    if re.search(NETWORK_PROGRAM, text):
        return "other_host"
    for host in re.findall(URL_HOST, text):
        host = host.lower().rstrip(".")
        if not any(host == h or host.endswith("." + h) for h in REGISTRY_HOSTS):
            return "other_host"
    return None


def is_imperative(text: str) -> bool:
    """A sentence that tells its reader what to do (or states a standing decision)."""
    return bool(re.search(IMPERATIVE, text.strip()))


def normalized(text: str) -> str:
    """Lower-case words of ``text`` joined by one space (what sentences are compared on)."""
    return " ".join(re.findall(WORD, text.lower()))


def untrusted_sentences(texts: pl.Series) -> set[str]:
    """The imperative sentences of ``texts`` (the text of items nobody typed: tool output,
    fetched pages, file reads, injected and agent text), normalized; sentences are split at
    ``.``/``!``/``?``/``;`` and line ends."""
    if texts.is_empty():
        return set()
    sentence = pl.col("s").str.strip_chars(" \t-*>#`'\"")
    found = (
        pl.DataFrame({"t": texts.cast(pl.String)})
        .lazy()
        .filter(pl.col("t").str.contains(IMPERATIVE))
        .select(s=pl.col("t").str.replace_all(r"([.!?;])\s+", "${1}\n").str.split("\n"))
        .explode("s")
        .filter(sentence.str.contains(IMPERATIVE))
        .select(s=sentence.str.to_lowercase().str.extract_all(WORD).list.join(" "))
        .filter(pl.col("s").str.count_matches(" ") >= MIN_SENTENCE_WORDS - 1)
        .unique()
        .collect()
    )
    return set(found["s"].to_list())


def distrusted(untrusted: set[str], user_texts: Iterable[str]) -> set[str]:
    """``untrusted`` without the sentences the user typed too (an agent repeating the user's
    preference back does not make it untrusted)."""
    typed = "\n".join(normalized(t) for t in user_texts if t)
    return {s for s in untrusted if s not in typed}


def line_verdict(line: str, untrusted: Iterable[str] = ()) -> str | None:
    """Why a memory line is dropped (``risky:<reason>``, ``copied_instruction``), or None."""
    for span in re.findall(CODE_SPAN, line):
        risk = risk_reason(span)
        if risk is not None:
            return f"risky:{risk}"
    for reason, pattern in RISKS:
        if reason in PROSE_RISKS and re.search(pattern, line):
            return f"risky:{reason}"
    flat = normalized(line)
    if flat and any(s in flat for s in untrusted):
        return "copied_instruction"
    return None


def filter_lines(text: str, untrusted: Iterable[str] = ()) -> tuple[str, Counter[str]]:
    """``text`` without the lines :func:`line_verdict` drops (a heading and the front matter
    are never dropped), and how many were dropped per reason."""
    sentences = tuple(untrusted)
    kept: list[str] = []
    dropped: Counter[str] = Counter()
    for line in text.split("\n"):
        stripped = line.strip()
        structural = not stripped or stripped.startswith("#") or stripped == "---"
        verdict = None if structural else line_verdict(stripped, sentences)
        if verdict is None:
            kept.append(line)
        else:
            dropped[verdict] += 1
    return "\n".join(kept), dropped
