"""``memkiln redact`` removes a private-key block whole wherever it sits in the input, also
across the 8 MiB pieces it redacts at a time (a build log has no blank lines to cut at)."""

from __future__ import annotations

import base64
import io
import random

from memkiln.io.rules import load_rules
from memkiln.io.scrub import CHUNK_BYTES, redact_streams

LOG_LINE = "2026-12-01 10:00:00 INFO build step ok " + "x" * 60 + "\n"


def private_key(seed: int) -> tuple[str, list[str]]:
    """A PEM block and its base64 lines."""
    body = base64.b64encode(random.Random(seed).randbytes(1190)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    block = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines)
    return block + "\n-----END RSA PRIVATE KEY-----\n", lines


def redacted(text: str) -> str:
    out = io.BytesIO()
    redact_streams([], stdin=io.BytesIO(text.encode()), stdout=out, rules=load_rules())
    return out.getvalue().decode()


def test_a_private_key_in_a_short_log_is_removed_whole() -> None:
    block, lines = private_key(1)
    out = redacted(LOG_LINE * 10 + "cat deploy.pem\n" + block + LOG_LINE * 10)
    assert not [line for line in lines if line in out]
    assert "-----END RSA PRIVATE KEY-----" not in out


def test_a_private_key_across_the_boundary_of_two_pieces_is_removed_whole() -> None:
    block, lines = private_key(2)
    # the block starts about 800 bytes before the end of the first 8 MiB piece
    before = LOG_LINE * ((CHUNK_BYTES - 800) // len(LOG_LINE)) + "cat deploy.pem\n"
    assert len(before) < CHUNK_BYTES < len(before) + len(block)
    out = redacted(before + block + LOG_LINE * 50)
    assert not [line for line in lines if line in out]
    assert "-----END RSA PRIVATE KEY-----" not in out


def test_a_begin_line_never_ended_neither_loses_text_nor_holds_every_piece_back() -> None:
    from memkiln.io.scrub import KEY_BLOCK_BYTES, _chunks

    text = b"-----BEGIN NOTES-----\n" + b"a line of a long log\n" * (KEY_BLOCK_BYTES // 5)
    pieces = list(_chunks(io.BytesIO(text), 4096))
    assert b"".join(pieces) == text
    assert max(map(len, pieces)) <= KEY_BLOCK_BYTES + 2 * 4096
