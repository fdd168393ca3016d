"""``memkiln redact``'s streaming body: only the lines the prefilter reports reach the regexes,
and the output is the one of the whole-piece redaction (``io/scrub``), byte for byte, on the
session corpus, on text that is not JSON lines, on bytes that are not UTF-8, and without
Hyperscan."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from memkiln.io import redact_stream, scrub
from memkiln.io import rules as rules_io
from memkiln.io.rules import load_rules
from memkiln.transforms import redact_prefilter
from memkiln.transforms.redact import RuleSet

ROLLOUTS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "rollouts"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules(prefilter=True)


def _run(module: object, data: bytes, rules: RuleSet) -> tuple[bytes, dict[str, int]]:
    out = io.BytesIO()
    hits = module.redact_streams([], stdin=io.BytesIO(data), stdout=out, rules=rules)  # type: ignore[attr-defined]
    return out.getvalue(), dict(hits)


SESSION = (
    b'{"type":"session_meta","payload":{"cwd":"/srv/app"}}\n'
    b'{"type":"message","text":"nothing here at all"}\n'
    b'{"type":"function_call_output","output":"export GITHUB_TOKEN=ghp_'
    + b"A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    + b'\\nok"}\n'
    b'{"type":"message","text":"the key sk-proj-'
    + b"Zx81Qw7Er6Ty5Ui4Op3As2Df1Gh0Jk9Lm8Nb7Vc6"
    + b' was rotated"}\n'
    b'{"type":"message","text":"caf\xe9 \xff not utf-8"}'
)


def test_a_session_is_redacted_as_the_whole_piece_would_be(rules: RuleSet) -> None:
    fast, fast_hits = _run(redact_stream, SESSION, rules)
    slow, slow_hits = _run(scrub, SESSION, rules)
    assert fast == slow and fast_hits == slow_hits
    assert b"ghp_A1b2" not in fast and b"sk-proj-Zx81" not in fast
    assert b'{"type":"message","text":"nothing here at all"}\n' in fast
    assert fast.endswith('caf\ufffd \ufffd not utf-8"}'.encode())  # no line break added


def test_text_that_is_not_json_lines_is_redacted_whole(rules: RuleSet) -> None:
    text = (
        b"log start\n"
        b"-----BEGIN OPENSSH PRIVATE KEY-----\n"
        b"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        b"-----END OPENSSH PRIVATE KEY-----\n"
        b"password: hunter2-Xk29Ls0q\n"
    )
    fast, hits = _run(redact_stream, text, rules)
    assert (fast, hits) == _run(scrub, text, rules)
    assert b"b3BlbnNzaC1" not in fast and b"hunter2-Xk29" not in fast


def test_without_hyperscan_the_output_is_the_same(
    rules: RuleSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _run(redact_stream, SESSION, rules)
    monkeypatch.setattr(redact_prefilter, "_hyperscan", None)  # the wheel missing
    bare = dataclasses.replace(rules, prefilter=None)
    assert rules_io.prefiltered(bare).prefilter is None
    assert _run(redact_stream, SESSION, bare) == fast


@pytest.mark.corpus
@pytest.mark.skipif(not ROLLOUTS.is_dir(), reason="the shared session corpus is not here")
def test_the_corpus_is_redacted_as_the_whole_piece_would_be(rules: RuleSet) -> None:
    files = sorted(ROLLOUTS.rglob("*.jsonl"))
    data = b"".join(f.read_bytes() for f in files)
    assert len(data) > 20_000_000
    fast, fast_hits = _run(redact_stream, data, rules)
    slow, slow_hits = _run(scrub, data, rules)
    assert fast_hits == slow_hits and sum(fast_hits.values()) > 0
    assert fast == slow
