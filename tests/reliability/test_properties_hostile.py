"""Property-based tests of hostile input: any timestamp a session carries, any bytes a file
name holds, and any compressed stream (members and frames cut anywhere, lines of any length,
damaged or cut short) end in a stored session or a quarantine with a reason, never a crash,
and a file is read within its limits."""

from __future__ import annotations

import gzip
import itertools
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkiln.io.archive import FileStat, read_file
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.settle import CLOCK_SKEW, EARLIEST_TIME
from tests.reliability.ingest_harness import ingest_bytes, jsonl
from tests.reliability.samples import CODEX

FAST = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(FAST, max_examples=12)

#: Timestamps as sessions write them, and as they should not: any year, with a zone, without
#: one, with an offset, or any text at all.
stamps = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31))
    .map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3])
    .flatmap(lambda s: st.sampled_from([s + "Z", s, s + "+02:00", s + "-11:30"])),
    st.sampled_from(["0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "", "null", "2026-13-45"]),
    st.text(max_size=30),
)


@FAST
@given(stamps, st.booleans())
def test_any_timestamp_ends_in_a_stored_session_in_range_or_a_quarantined_one(
    stamp: str, every_line: bool
) -> None:
    lines = [dict(line) for line in CODEX]
    for i, line in enumerate(lines):
        if every_line or i == 0:
            line["timestamp"] = stamp
            if line["type"] == "session_meta":
                line["payload"] = {**line["payload"], "timestamp": stamp}
    stored = ingest_bytes(jsonl(lines))
    reasons = set(stored.quarantine["reason"].to_list())
    if stored.rollouts.height:
        latest = datetime.now(UTC) + CLOCK_SKEW
        for column in ("started_at", "updated_at"):
            value = stored.rollouts[column].dt.to_string("%Y-%m-%dT%H:%M:%S%.f")[0]
            assert EARLIEST_TIME <= datetime.fromisoformat(value + "+00:00") <= latest
        assert "bad_timestamp" not in reasons
    else:
        assert "bad_timestamp" in reasons


#: A file name's bytes: anything but a slash and NUL, and not ``.`` or ``..``.
name_bytes = st.binary(min_size=1, max_size=30).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b"..")
)


@SLOW
@given(name_bytes)
def test_a_file_name_of_any_bytes_is_read_and_recognised_next_time(raw: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="memkiln-names-") as tmp:
        archive = Path(tmp) / "archive"
        archive.mkdir()
        with open(os.path.join(os.fsencode(archive), raw + b".jsonl"), "wb") as fh:
            fh.write(jsonl(CODEX))
        s = Settings(archive=archive, db=Path(tmp) / "m.duckdb", prefect=False, progress=False)
        first = ingest_archive(s)
        second = ingest_archive(s)
    assert (first.files_new, first.rollouts, first.quarantined) == (1, 1, 0)
    assert (second.files_skipped, second.files_new, second.files_changed) == (1, 0, 0)


#: Lines of any length (some over the small limit of these tests), joined by newlines.
line_lengths = st.lists(st.integers(0, 90), min_size=0, max_size=12)


def expected(data: bytes, max_line: int) -> bytes:
    """What ``read_file`` keeps of whole ``data``: each line over ``max_line`` an empty line."""
    parts = data.split(b"\n")
    return b"\n".join(b"" if len(p) > max_line else p for p in parts)


def compress(data: bytes, kind: str, cuts: list[int]) -> bytes:
    """``data`` in several gzip members or zstd frames, cut at ``cuts``."""
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)] or [b""]
    if kind == "gzip":
        return b"".join(gzip.compress(p) for p in pieces)
    return b"".join(zstandard.ZstdCompressor().compress(p) for p in pieces)


@FAST
@given(
    line_lengths,
    st.booleans(),
    st.sampled_from(["gzip", "zstd", "none"]),
    st.lists(st.integers(0, 2000), max_size=4),
    st.integers(20, 400),
)
def test_a_compressed_stream_cut_anywhere_reads_within_its_limits(
    lengths: list[int], ends_with_newline: bool, kind: str, cuts: list[int], max_bytes: int
) -> None:
    data = b"\n".join(bytes([97 + i % 26]) * n for i, n in enumerate(lengths))
    data += b"\n" if ends_with_newline and data else b""
    raw = data if kind == "none" else compress(data, kind, cuts)
    suffix = {"gzip": ".jsonl.gz", "zstd": ".jsonl.zst", "none": ".jsonl"}[kind]
    with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
        fh.write(raw)
        fh.flush()
        got = read_file(FileStat(fh.name, len(raw), 0), max_bytes=max_bytes, max_line=40)
    whole = expected(data, 40)
    assert len(got.data) <= max_bytes
    if len(whole) <= max_bytes:
        assert got.error is None and got.data == whole
        assert [(ln.line_no, ln.nbytes) for ln in got.long_lines] == [
            (i + 1, n) for i, n in enumerate(lengths) if n > 40
        ]
    else:
        assert got.error == "file_too_large"
        assert whole.startswith(got.data) and (not got.data or got.data.endswith(b"\n"))


@FAST
@given(line_lengths, st.sampled_from(["gzip", "zstd"]), st.integers(1, 60))
def test_a_compressed_stream_cut_short_keeps_what_came_before_and_says_so(
    lengths: list[int], kind: str, cut: int
) -> None:
    data = b"\n".join(b"x" * n for n in lengths) + b"\n"
    raw = compress(data, kind, [])
    raw = raw[: max(1, len(raw) - cut)]
    suffix = ".jsonl.gz" if kind == "gzip" else ".jsonl.zst"
    with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
        fh.write(raw)
        fh.flush()
        got = read_file(FileStat(fh.name, len(raw), 0), max_line=1000)
    assert got.error == "corrupt_compressed" or got.data == data  # a cut in the trailer only
    assert data.startswith(got.data)
