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
