"""Recall of memkiln's redaction on public secret-scanner test data, beside detect-secrets.

(Not named bench/secrets.py: with bench/ on sys.path that name would shadow the standard
library's ``secrets``, which DuckDB imports.)

Two sets, neither of them memkiln's nor its engine's own:

* **Kingfisher rule examples** (MongoDB's scanner; ``data/rules/*.yml`` of its repository): every
  rule carries ``examples:``. The examples scored are those of visible rules (helper rules marked
  ``visible: false`` and rules categorised ``identifier`` or ``domain`` left out) whose secret
  the rule's own pattern captures (its first capture group, else the whole match) with the regex
  engine Polars uses. memkiln's rules (secret_rules.toml) are its own, not these.
* **secretlint's snapshot cases**: every ``ng.*`` case (must be reported) of its rule packages;
  the secrets are the spans its expected ``output.json`` reports. ``ok.*`` cases (must not be
  reported) are scored for false positives: the share of them redaction changes at all.

A secret counts as caught when, after redaction, the secret string no longer occurs in the text.
``memkiln-own-only`` is memkiln's redaction without its maintained rule source (Betterleaks'
rules), to show what that source adds.

    .venv/bin/python bench/secret_recall.py [--corpus ../shared/corpus/secrets] [--families]

detect-secrets (``pip install detect-secrets``) is optional: without it its column is empty.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import redact_expr

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus" / "secrets"


@dataclass(frozen=True)
class Case:
    family: str  # Kingfisher rule file stem, or secretlint rule package
    text: str
    secrets: tuple[str, ...]


# -- the sets ----------------------------------------------------------------------------------


def _secret_of(pattern: str, example: str) -> str | None:
    """What the rule's own pattern captures in ``example`` (group 1, else the whole match)."""
    series = pl.Series([example], dtype=pl.String)
    try:
        groups = series.str.extract_groups(pattern).dtype
        group = 1 if isinstance(groups, pl.Struct) and groups.fields else 0
        found = series.str.extract(pattern, group).item()
    except pl.exceptions.PolarsError:
        return None
    return found if isinstance(found, str) and found else None


def kingfisher_cases(corpus: Path) -> tuple[list[Case], int]:
    """The selected examples, and how many examples of visible rules did not compile/capture."""
    cases: list[Case] = []
    skipped = 0
    for path in sorted((corpus / "mongodb__kingfisher" / "data" / "rules").glob("*.yml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for rule in doc.get("rules") or []:
            categories = set(rule.get("categories") or [])
            if rule.get("visible", True) is False or categories & {"identifier", "domain"}:
                continue
            for example in rule.get("examples") or []:
                secret = _secret_of(rule["pattern"], example)
                if secret is None:
                    skipped += 1
                    continue
                cases.append(Case(path.stem, example, (secret,)))
    return cases, skipped


def secretlint_cases(corpus: Path) -> tuple[list[Case], list[Case]]:
    """``(ng cases with their reported secrets, ok cases)`` of secretlint's rule packages."""
    root = corpus / "secretlint__secretlint" / "packages" / "@secretlint"
    positive: list[Case] = []
    negative: list[Case] = []
    for output in sorted(root.glob("secretlint-rule-*/test/snapshots/*/output.json")):
        case_dir = output.parent
        family = case_dir.parents[2].name.removeprefix("secretlint-rule-")
        inputs = [p for p in case_dir.iterdir() if p.name.startswith("input")]
        if not inputs:
            continue
        text = inputs[0].read_text(encoding="utf-8", errors="replace")
        messages = json.loads(output.read_text(encoding="utf-8")).get("messages", [])
        if case_dir.name.startswith("ng."):
            secrets = tuple(text[m["range"][0] : m["range"][1]] for m in messages if m.get("range"))
            secrets = tuple(s for s in secrets if s.strip())
            if secrets:
                positive.append(Case(family, text, secrets))
        elif case_dir.name.startswith("ok.") and not messages:
            negative.append(Case(family, text, ()))
    return positive, negative


# -- the redactors -----------------------------------------------------------------------------


def memkiln_redact(texts: list[str], *, own_only: bool = False) -> list[str]:
    """memkiln's redaction; ``own_only``: without the maintained source's (Betterleaks') rules."""
    rules = load_rules()
    if own_only:
        rules = dataclasses.replace(rules, external=None)
    frame = pl.DataFrame({"text": texts}, schema={"text": pl.String})
    return frame.select(redact_expr(pl.col("text"), rules=rules))["text"].to_list()


def detect_secrets_redact(texts: list[str]) -> list[str] | None:
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    out: list[str] = []
    with default_settings():
        for text in texts:
            lines = []
            for line in text.split("\n"):
                for found in scan_line(line):
                    if found.secret_value:
                        line = line.replace(found.secret_value, "[REDACTED]")
                lines.append(line)
            out.append("\n".join(lines))
    return out


# -- scoring -----------------------------------------------------------------------------------


def caught(cases: list[Case], redacted: list[str]) -> list[bool]:
    return [
        all(secret not in after for secret in case.secrets)
        for case, after in zip(cases, redacted, strict=True)
    ]


def pct(hits: list[bool]) -> str:
    return f"{100 * sum(hits) / len(hits):5.1f}%" if hits else "   - "


def report(name: str, cases: list[Case], results: dict[str, list[bool] | None], families: bool):
    engines = list(results)
    print(f"\n## {name}: {len(cases)} cases")
    if families:
        by_family: dict[str, list[int]] = defaultdict(list)
        for i, case in enumerate(cases):
            by_family[case.family].append(i)
        print(f"{'family':32} {'n':>4} " + " ".join(f"{e:>15}" for e in engines))
        for family, idx in sorted(by_family.items()):
            cells = []
            for engine in engines:
                hits = results[engine]
                cells.append(f"{pct([hits[i] for i in idx]) if hits else '-':>15}")
            print(f"{family:32} {len(idx):4} " + " ".join(cells))
    for engine in engines:
        hits = results[engine]
        if hits is None:
            print(f"overall {engine}: not installed")
        else:
            print(f"overall {engine}: {pct(hits)} ({sum(hits)}/{len(hits)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--families", action="store_true", help="print one row per family")
    parser.add_argument("--misses", type=int, default=0, help="print up to N missed cases")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no secret corpus at {args.corpus}", file=sys.stderr)
        return 2

    kf, skipped = kingfisher_cases(args.corpus)
    sl_pos, sl_neg = secretlint_cases(args.corpus)
    print(f"Kingfisher examples selected: {len(kf)} (not captured by their own pattern: {skipped})")
    for name, cases in [("Kingfisher rule examples", kf), ("secretlint ng.* cases", sl_pos)]:
        texts = [case.text for case in cases]
        started = time.perf_counter()
        mine = caught(cases, memkiln_redact(texts))
        took = time.perf_counter() - started
        own = caught(cases, memkiln_redact(texts, own_only=True))
        theirs_text = detect_secrets_redact(texts)
        theirs = caught(cases, theirs_text) if theirs_text is not None else None
        results = {"memkiln": mine, "memkiln-own-only": own, "detect-secrets": theirs}
        report(name, cases, results, args.families)
        print(f"memkiln redaction of the set: {took:.1f} s")
        misses = [case for case, hit in zip(cases, mine, strict=True) if not hit]
        for case in misses[: args.misses]:
            print(f"  MISS {case.family}: {case.text[:160]!r}")
    texts = [case.text for case in sl_neg]
    changed = [after != before for before, after in zip(texts, memkiln_redact(texts), strict=True)]
    print(f"\n## secretlint ok.* cases: {len(sl_neg)}; changed by memkiln: {sum(changed)}")
    for case, hit in zip(sl_neg, changed, strict=True):
        if hit:
            print(f"  CHANGED {case.family}: {case.text[:120]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
