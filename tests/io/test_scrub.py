"""memkiln.io.scrub: chunked redaction gives the same bytes as redacting the text whole."""

from __future__ import annotations

import io
import random
import string

import pytest

from memkiln.io import scrub
from memkiln.io.rules import load_rules
from memkiln.transforms.redact import redact_text


def test_chunks_end_at_line_breaks_and_lose_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random("scrub")
    lines = []
    for i in range(400):
        value = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(30))
        lines.append(f"line {i}: SERVICE_TOKEN={value}9" if i % 7 == 0 else f"plain line {i}")
        if i % 50 == 0:
            lines.append("")  # paragraph breaks, where chunks prefer to end
    text = "\n".join(lines) + "\ntrailing text without a line break"
    monkeypatch.setattr(scrub, "CHUNK_BYTES", 512)
    chunks = list(scrub._chunks(io.BytesIO(text.encode()), 512))
    assert len(chunks) > 10 and b"".join(chunks) == text.encode()
    assert all(c.endswith(b"\n") for c in chunks[:-1])

    out = io.BytesIO()
    hits = scrub.redact_streams([], stdin=io.BytesIO(text.encode()), stdout=out, rules=load_rules())
    assert out.getvalue().decode() == redact_text(text, rules=load_rules())
    assert sum(hits.values()) == len([i for i in range(400) if i % 7 == 0])


def test_json_lines_are_redacted_one_row_each_as_each_line_alone() -> None:
    rng = random.Random("scrub-jsonl")
    rules = load_rules()
    lines = []
    for i in range(300):
        value = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))
        text = f"export GITHUB_TOKEN=ghp_{value}" if i % 5 == 0 else f"plain output {i}"
        lines.append('{"type":"function_call_output","output":"' + text + '\\n"}\n')
    out = io.BytesIO()
    hits = scrub.redact_streams(
        [], stdin=io.BytesIO("".join(lines).encode()), stdout=out, rules=rules
    )
    alone = [next(scrub.redact_chunks([line], rules=rules))[0] for line in lines]
    assert scrub._rows("".join(lines)) == lines
    assert out.getvalue().decode() == "".join(alone)
    assert "ghp_" not in out.getvalue().decode() and sum(hits.values()) == 60


def test_a_chunk_that_is_not_json_lines_is_redacted_as_one_text() -> None:
    text = '{"a": 1}\nmachine api.example.com\n  login ci\n  password Zq8v3Kd9Lm2x\n'
    assert scrub._rows(text) == [text]
    out = io.BytesIO()
    scrub.redact_streams([], stdin=io.BytesIO(text.encode()), stdout=out, rules=load_rules())
    assert "Zq8v3Kd9Lm2x" not in out.getvalue().decode()
