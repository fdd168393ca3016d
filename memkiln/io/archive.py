"""Reading the archive: discover rollout files, fingerprint them, read their bytes.

Everything here touches the file system; decisions about the bytes live in ``transforms``.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mode
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard

from memkiln.constants import ROLLOUT_SUFFIXES


@dataclass(frozen=True, slots=True)
class FileStat:
    """A discovered file's fingerprint: path, size and modification time."""

    path: str
    size: int
    mtime_ns: int

    @property
    def compression(self) -> str:
        return compression_of(self.path)


@dataclass(frozen=True, slots=True)
class FileBytes:
    """A file's decompressed bytes, and why reading stopped early if it did."""

    stat: FileStat
    data: bytes
    error: str | None = None  # fixed reason when the file could only be partly read
    detail: str | None = None


def compression_of(path: str) -> str:
    if path.endswith(".gz"):
        return "gzip"
    if path.endswith(".zst"):
        return "zstd"
    return "none"


def discover(archive: Path) -> Iterator[FileStat]:
    """Yield every rollout file under ``archive``, recursively, in a stable order.

    Symbolic links are never followed, to files or to directories: a link can point anywhere
    (``archive/x.jsonl -> /etc/passwd``), and nothing outside the archive is read. Only
    regular files are yielded.
    """
    for root, dirs, names in os.walk(archive):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(ROLLOUT_SUFFIXES):
                continue
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue  # vanished: nothing to read
            if not stat_mode.S_ISREG(st.st_mode):
                continue  # a symbolic link, a fifo, a device: not read
            yield FileStat(path=os.path.abspath(full), size=st.st_size, mtime_ns=st.st_mtime_ns)


def read_file(stat: FileStat) -> FileBytes:
    """Read and decompress one file; a corrupt stream keeps the bytes read before the damage.

    The file is opened without following a symbolic link (one put in its place after
    discovery is refused as unreadable).
    """
    try:
        fd = os.open(stat.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return FileBytes(stat, b"", "unreadable_file", f"{type(exc).__name__}: {exc.strerror}")
    kind = stat.compression
    if kind == "gzip":
        return _gunzip(stat, raw)
    if kind == "zstd":
        return _unzstd(stat, raw)
    return FileBytes(stat, raw)


def path_key(path: str) -> str:
    """The key a file is recognised by from run to run: sha256 (hex) of its real path (the
    stored path is redacted, and DuckDB's ``sha256(path)`` gives the same key)."""
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()  # hardware-accelerated: ~2x blake2b here


def _gunzip(stat: FileStat, raw: bytes) -> FileBytes:
    out: list[bytes] = []
    rest = raw
    try:
        while rest:  # a .gz file may hold several members back to back
            d = zlib.decompressobj(wbits=31)
            out.append(d.decompress(rest))
            if not d.eof:
                return FileBytes(
                    stat, b"".join(out), "corrupt_compressed", "gzip stream ends early"
                )
            rest = d.unused_data.lstrip(b"\x00")
    except zlib.error as exc:
        return FileBytes(stat, b"".join(out), "corrupt_compressed", f"gzip: {exc}")
    return FileBytes(stat, b"".join(out))


def _unzstd(stat: FileStat, raw: bytes) -> FileBytes:
    out: list[bytes] = []
    rest = raw
    try:
        while rest:  # one decompression object per frame, so a cut-off last frame shows
            d = zstandard.ZstdDecompressor().decompressobj()
            out.append(d.decompress(rest))
            if not d.eof:
                return FileBytes(
                    stat, b"".join(out), "corrupt_compressed", "zstd stream ends early"
                )
            rest = d.unused_data
    except zstandard.ZstdError as exc:
        return FileBytes(stat, b"".join(out), "corrupt_compressed", f"zstd: {exc}")
    return FileBytes(stat, b"".join(out))
