"""Property-based tests: whatever one line of a session file holds (arbitrary bytes, any JSON
value, a field of a real line removed, nulled or of the wrong type), ingest does not crash,
that line is stored or quarantined with a reason, and every other line of the file is kept."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkiln.transforms.lines import split_lines
from tests.reliability.ingest_harness import accounted_lines, ingest_bytes
from tests.reliability.samples import FORMATS, damaged, paths

FAST = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
#: Keys the three formats read, so that generated objects hit the interesting branches.
format_keys = st.sampled_from(
    [
        "type",
        "payload",
        "timestamp",
        "id",
        "sessionId",
        "message",
        "content",
        "role",
        "cwd",
        "record_type",
        "session_id",
        "agentId",
        "isSidechain",
        "git",
        "text",
        "name",
        "output",
        "arguments",
        "call_id",
        "summary",
        "version",
    ]
)
json_objects = st.dictionaries(
    format_keys | st.text(max_size=8),
    json_values | st.sampled_from(["session_meta", "response_item", "message", "user"]),
    max_size=6,
)
formats = st.sampled_from(sorted(FORMATS))


def blank(line: bytes) -> bool:
    try:
        return not line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False


def check_kept(lines: list[bytes], hostile_at: int) -> None:
    """Ingest ``lines``: every non-blank line is accounted for, the file's session is stored."""
    stored = ingest_bytes(b"\n".join(lines) + b"\n")
    accounted = accounted_lines(stored)
    expected = {i + 1 for i, line in enumerate(lines) if not blank(line)}
    others = expected - {hostile_at + 1}
    assert others <= accounted, f"lost lines {sorted(others - accounted)}"
    if hostile_at + 1 in expected:
        assert hostile_at + 1 in accounted, "the damaged line is neither stored nor quarantined"
    assert stored.rollouts.height == 1
    assert stored.quarantine["reason"].null_count() == 0


def with_line(fmt: str, at: int, line: bytes) -> list[bytes]:
    base = [json.dumps(obj).encode() for obj in FORMATS[fmt]]
    at = min(at, len(base))
    return [*base[:at], line, *base[at:]]


@FAST
@given(fmt=formats, at=st.integers(0, 5), raw=st.binary(max_size=300))
def test_a_line_of_arbitrary_bytes_loses_nothing_else(fmt: str, at: int, raw: bytes) -> None:
    line = raw.replace(b"\n", b" ")
    lines = with_line(fmt, at, line)
    check_kept(lines, min(at, len(lines) - 1))


@FAST
@given(fmt=formats, at=st.integers(0, 5), value=json_values | json_objects, ascii=st.booleans())
def test_a_line_holding_any_json_value_loses_nothing_else(
    fmt: str, at: int, value: Any, ascii: bool
) -> None:
    line = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    lines = with_line(fmt, at, line)
    check_kept(lines, min(at, len(lines) - 1))


@FAST
@given(fmt=formats, data=st.data())
def test_a_field_missing_null_or_wrongly_typed_never_crashes_ingest(fmt: str, data: Any) -> None:
    base = FORMATS[fmt]
    at = data.draw(st.integers(0, len(base) - 1), label="line")
    path = data.draw(st.sampled_from(list(paths(base[at]))), label="path")
    drop = data.draw(st.booleans(), label="drop")
    value = None if drop else data.draw(json_values, label="value")
    lines = [json.dumps(obj).encode() for obj in base]
    lines[at] = json.dumps(damaged(base[at], path, value, drop=drop)).encode()
    stored = ingest_bytes(b"\n".join(lines) + b"\n")
    assert accounted_lines(stored) == set(range(1, len(lines) + 1))
    assert stored.quarantine["reason"].null_count() == 0


@FAST
@given(chunks=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_split_lines_numbers_lines_like_python(chunks: list[bytes]) -> None:
    lines = split_lines(list(enumerate(chunks, start=1)))
    for fid, data in enumerate(chunks, start=1):
        data = data.removeprefix(b"\xef\xbb\xbf")
        expected = data.split(b"\n")
        if expected and expected[-1] == b"":
            expected.pop()
        got = lines.filter(pl.col("fid") == fid).sort("line_no")
        assert got["line_no"].to_list() == list(range(1, len(expected) + 1))
        assert got["nbytes"].to_list() == [len(e) for e in expected]
