"""Reading the archive: discover rollout files, fingerprint them, read their bytes.

Everything here touches the file system; decisions about the bytes live in ``transforms``.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mode
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import zstandard

from memkiln.constants import MAX_FILE_BYTES, MAX_LINE_BYTES, ROLLOUT_SUFFIXES, WHOLE_FILE_BYTES

#: Bytes read from a plain file, or decompressed from a gzip stream, at a time.
READ_PIECE_BYTES = 1024 * 1024
#: Compressed bytes read from a gzip file at a time.
COMPRESSED_PIECE_BYTES = 256 * 1024
#: Compressed bytes given to zstd at a time (see ``_unzstd``).
ZSTD_INPUT_BYTES = 1024


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
    long_lines: tuple[LongLine, ...] = ()  # lines left out for their length


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


def read_file(
    stat: FileStat, *, max_bytes: int = WHOLE_FILE_BYTES, max_line: int = MAX_LINE_BYTES
) -> FileBytes:
    """Read and decompress one file in bounded pieces; a corrupt stream keeps the bytes read
    before the damage. What is read is held whole: a larger file is read with
    :func:`read_pieces`.

    Memory follows the limits, not the file: a line longer than ``max_line`` bytes is left
    out (an empty line in its place keeps the numbering) and listed in ``long_lines``; past
    ``max_bytes`` of decompressed lines, reading stops at the last whole line
    (``file_too_large``). The file is opened without following a symbolic link (one put in
    its place after discovery is refused as unreadable).
    """
    try:
        fd = os.open(stat.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        return FileBytes(stat, b"", "unreadable_file", f"{type(exc).__name__}: {exc.strerror}")
    kind = stat.compression
    lines = BoundedLines(max_bytes=max_bytes, max_line=max_line)
    error: tuple[str, str] | None = None
    with open(fd, "rb") as fh:
        pieces = _gunzip(fh) if kind == "gzip" else _unzstd(fh) if kind == "zstd" else _plain(fh)
        try:
            for piece in pieces:
                if not lines.add(piece):
                    error = (
                        "file_too_large",
                        f"more than {max_bytes} bytes of lines: the lines after line "
                        f"{lines.newlines} are not read",
                    )
                    break
        except OSError as exc:
            error = ("unreadable_file", f"{type(exc).__name__}: {exc.strerror}")
        except CorruptStream as exc:
            error = ("corrupt_compressed", str(exc))
        finally:
            pieces.close()
    if error is None and lines.taken + lines.held > max_bytes:  # an unfinished last line past it
        error = ("file_too_large", f"more than {max_bytes} bytes of lines")
    data, long_lines = lines.finish(
        complete_only=error is not None and error[0] == "file_too_large"
    )
    if error:
        return FileBytes(stat, data, error[0], error[1], long_lines=long_lines)
    return FileBytes(stat, data, long_lines=long_lines)


@dataclass(frozen=True, slots=True)
class FilePiece:
    """Some whole lines of a file read in pieces (:func:`read_pieces`)."""

    data: bytes
    first_line: int  # the number of its first line in the file, from 1
    long_lines: tuple[LongLine, ...] = ()  # lines among them left out for their length
    error: str | None = None  # the last piece: why reading stopped early, if it did
    detail: str | None = None
    last: bool = False


def read_pieces(
    stat: FileStat,
    *,
    piece_bytes: int,
    max_bytes: int = MAX_FILE_BYTES,
    max_line: int = MAX_LINE_BYTES,
) -> Generator[FilePiece, None, None]:
    """A file's lines in pieces of about ``piece_bytes`` (each whole lines, in order, the
    last one marked ``last``), within the limits of :func:`read_file`: what is held at once
    is one piece, plus one unfinished line of at most ``max_line`` bytes, whatever the file
    holds. The pieces together are what :func:`read_file` gives with the same limits."""
    try:
        fd = os.open(stat.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        detail = f"{type(exc).__name__}: {exc.strerror}"
        yield FilePiece(b"", 1, error="unreadable_file", detail=detail, last=True)
        return
    kind = stat.compression
    lines = BoundedLines(max_bytes=max_bytes, max_line=max_line)
    first = 1
    step = max(1, min(READ_PIECE_BYTES, piece_bytes))
    error: tuple[str, str] | None = None
    with open(fd, "rb") as fh:
        chunks = _gunzip(fh) if kind == "gzip" else _unzstd(fh) if kind == "zstd" else _plain(fh)
        try:
            for chunk in chunks:
                # in slices: a zstd chunk may hold ~45 MiB, a piece stays near its size
                for at in range(0, len(chunk), step):
                    if not lines.add(chunk[at : at + step]):
                        error = (
                            "file_too_large",
                            f"more than {max_bytes} bytes of lines: the lines after line "
                            f"{lines.newlines} are not read",
                        )
                        break
                    if lines.whole_bytes >= piece_bytes:
                        data, long = lines.take_lines()
                        yield FilePiece(data, first, long)
                        first = lines.newlines + 1
                if error:
                    break
        except OSError as exc:
            error = ("unreadable_file", f"{type(exc).__name__}: {exc.strerror}")
        except CorruptStream as exc:
            error = ("corrupt_compressed", str(exc))
        finally:
            chunks.close()
    if error is None and lines.taken + lines.held > max_bytes:
        error = ("file_too_large", f"more than {max_bytes} bytes of lines")
    data, long = lines.finish(complete_only=error is not None and error[0] == "file_too_large")
    yield FilePiece(
        data, first, long, error[0] if error else None, error[1] if error else None, last=True
    )


class CorruptStream(Exception):
    """A compressed stream that cannot be decompressed further (the message says why)."""


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line left out for its length: its number in the file and its length in bytes."""

    line_no: int
    nbytes: int


class BoundedLines:
    """Pieces of a file's bytes gathered into its lines, within two limits: a line longer than
    ``max_line`` is replaced by an empty line (its number and length kept in ``long``), and
    ``add`` refuses a piece once its whole lines would pass ``max_bytes`` (so at most
    ``max_bytes`` of lines and ``max_line`` of an unfinished one are held). Every search is a
    bytes method (C speed); nothing loops over lines in Python."""

    def __init__(self, *, max_bytes: int, max_line: int) -> None:
        self.max_bytes = max_bytes
        self.max_line = max_line
        self.pieces: list[bytes] = []
        self.held = 0  # bytes in ``pieces``
        self.taken = 0  # bytes of whole lines handed out by ``take_lines`` before
        self.newlines = 0  # newlines in ``pieces`` (line numbers of what follows)
        self.tail = 0  # bytes of the last line so far (not ended by a newline yet)
        self.skipping = 0  # > 0: bytes of a long line being dropped
        self.long: list[LongLine] = []

    def add(self, piece: bytes) -> bool:
        """Take a piece; false once the file is over ``max_bytes`` (the rest not taken)."""
        if len(piece) <= self.max_line:
            return self._add(piece)
        # in slices no longer than a line may be, only the line that crosses a slice's start
        # can be over the limit
        step = self.max_line
        view = memoryview(piece)
        return all(self._add(bytes(view[i : i + step])) for i in range(0, len(piece), step))

    def _add(self, piece: bytes) -> bool:
        while piece:
            nl = piece.find(b"\n")
            if self.skipping:
                if nl < 0:
                    self.skipping += len(piece)
                    return True
                if self.taken + self.held + 1 > self.max_bytes:  # no room for its empty line
                    self.skipping += nl
                    return False
                self._end_long(self.skipping + nl)
                piece = piece[nl + 1 :]
                continue
            first = len(piece) if nl < 0 else nl  # bytes of the last line in this piece
            if self.tail + first > self.max_line:
                # the last line is over the limit: drop what is held of it, skip the rest
                self.skipping = self.tail + first
                self._drop_tail()
                if nl < 0:
                    return True
                if self.taken + self.held + 1 > self.max_bytes:
                    return False
                self._end_long(self.skipping)
                piece = piece[nl + 1 :]
                continue
            last = piece.rfind(b"\n")
            # whole lines only count
            if last >= 0 and self.taken + self.held + last + 1 > self.max_bytes:
                return False
            self.pieces.append(piece)
            self.held += len(piece)
            if last < 0:
                self.tail += len(piece)
            else:
                self.newlines += piece.count(b"\n")
                self.tail = len(piece) - last - 1
            return True
        return True

    def _drop_tail(self) -> None:
        """Remove the bytes held of the last, unfinished line."""
        drop = self.tail
        while drop:
            last = self.pieces[-1]
            if len(last) <= drop:
                self.pieces.pop()
                drop -= len(last)
                self.held -= len(last)
            else:
                self.pieces[-1] = last[: len(last) - drop]
                self.held -= drop
                drop = 0
        self.tail = 0

    def _end_long(self, nbytes: int) -> None:
        self.long.append(LongLine(self.newlines + 1, nbytes))
        self.pieces.append(b"\n")
        self.held += 1
        self.newlines += 1
        self.skipping = 0
        self.tail = 0

    @property
    def whole_bytes(self) -> int:
        """Bytes of whole lines held (what :meth:`take_lines` would hand out)."""
        return self.held - self.tail

    def take_lines(self) -> tuple[bytes, tuple[LongLine, ...]]:
        """The whole lines held, and the lines left out for their length among them, handed
        out and let go: the unfinished last line stays (or the long line being skipped), and
        line numbers go on from where they are. ``max_bytes`` counts what was taken too."""
        data = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        whole, rest = data[: len(data) - self.tail], data[len(data) - self.tail :]
        self.pieces = [rest] if rest else []
        self.held = len(rest)
        self.taken += len(whole)
        long, self.long = tuple(self.long), []
        return whole, long

    def finish(self, *, complete_only: bool) -> tuple[bytes, tuple[LongLine, ...]]:
        """The lines held (``complete_only``: without an unfinished last line), and the
        lines left out for their length. A long line still being skipped at the end of the
        file is one of them."""
        if self.skipping:
            self.long.append(LongLine(self.newlines + 1, self.skipping))
            self.skipping = 0
        elif complete_only:
            self._drop_tail()
        data = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        self.pieces = []
        return data, tuple(self.long)


def shown_path(path: str) -> str:
    """A path as text any frame or table holds: the bytes of a name that is not UTF-8 (an old
    zip's, a copy from another system's) written as ``\\xNN``. The file itself is read by
    its real path (``os.fsencode(path)``), and recognised by :func:`path_key`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def path_key(path: str) -> str:
    """The key a file is recognised by from run to run: sha256 (hex) of its real path (the
    stored path is redacted, and DuckDB's ``sha256(path)`` gives the same key)."""
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()  # hardware-accelerated: ~2x blake2b here


def _plain(fh: BinaryIO) -> Generator[bytes, None, None]:
    while piece := fh.read(READ_PIECE_BYTES):
        yield piece


def _gunzip(fh: BinaryIO) -> Generator[bytes, None, None]:
    """Decompressed pieces of at most ``READ_PIECE_BYTES`` of a gzip file, whatever its
    members hold (a .gz file may hold several members back to back, with NUL padding)."""
    d = zlib.decompressobj(wbits=31)
    pending = b""  # input read but not given to a member yet
    member = False  # a member has begun and not ended
    while True:
        if d.unconsumed_tail:
            data = d.unconsumed_tail
        elif pending:
            data, pending = pending, b""
        else:
            data = fh.read(COMPRESSED_PIECE_BYTES)
        try:
            if not data:
                if member:
                    if out := d.flush():  # a few bytes at most, from input already taken
                        yield out
                    if not d.eof:
                        raise CorruptStream("gzip stream ends early")
                return
            if not member:
                data = data.lstrip(b"\x00")
                if not data:
                    continue
                d = zlib.decompressobj(wbits=31)
                member = True
            out = d.decompress(data, READ_PIECE_BYTES)
        except zlib.error as exc:
            raise CorruptStream(f"gzip: {exc}") from exc
        if d.eof:
            member = False
            pending = d.unused_data
        if out:
            yield out


def _unzstd(fh: BinaryIO) -> Generator[bytes, None, None]:
    """Decompressed pieces of a zstd file, one decompression object per frame so that a
    cut-off last frame shows. The input goes in pieces of ``ZSTD_INPUT_BYTES``: a frame's
    blocks hold at most 128 KiB each and take at least 3 bytes, so one piece yields at most
    about 45 MiB, whatever the stream holds (``decompress`` of zstandard has no output limit)."""
    d = zstandard.ZstdDecompressor().decompressobj()
    started = False
    while True:
        data = fh.read(ZSTD_INPUT_BYTES)
        if not data:
            if started and not d.eof:
                raise CorruptStream("zstd stream ends early")
            return
        while data:
            if d.eof:
                d = zstandard.ZstdDecompressor().decompressobj()
            started = True
            try:
                out = d.decompress(data)
            except zstandard.ZstdError as exc:
                raise CorruptStream(f"zstd: {exc}") from exc
            data = d.unused_data if d.eof else b""
            if out:
                yield out
