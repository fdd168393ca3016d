"""Writing memory files safely: inside the output root only, atomically, and only on change.

- The output root must not be a symbolic link, and no path below it may pass through one.
- Every relative path is checked to stay inside the root after resolution.
- A file is written to a temporary sibling, flushed, then renamed over the target, so a
  killed run leaves the old or the new version, never a partial one. Temporaries left by a
  killed run are removed by the next.
- A file whose bytes would not change is not touched (its mtime stays).
- No file holds a control character, a bidirectional override or another invisible
  format character (``memkiln.transforms.text.clean_text``), whatever the session or the
  model wrote.
- The root must be writable: that is checked once, before any work, so a read-only
  ``--out`` is one clear error rather than a failure per file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path, PurePosixPath

from memkiln.errors import ConfigError
from memkiln.transforms.text import clean_text

TEMP_PREFIX = ".memkiln-tmp-"


def replace_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as one step: a new temporary file beside it, synced, then
    renamed over it (a reader sees the old bytes or the new ones, never a part)."""
    temp = path.parent / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
    try:
        with open(temp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    finally:
        if temp.exists():
            temp.unlink()


class UnsafePathError(ConfigError):
    """A path would land outside the output root or go through a link."""


class OutputRoot:
    """The ``--out`` directory, and the only way memkiln writes below it."""

    def __init__(self, root: Path) -> None:
        if root.is_symlink():
            raise ConfigError(f"output directory {root} is a symbolic link; give a real directory")
        if root.exists() and not root.is_dir():
            raise ConfigError(f"output path {root} exists and is not a directory")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output directory {root}: {exc.strerror}") from exc
        self.root = root.resolve()
        probe = self.root / f"{TEMP_PREFIX}probe-{uuid.uuid4().hex}"
        try:
            probe.touch(exist_ok=False)
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"output directory {root} is not writable ({exc.strerror}); "
                "give a directory memkiln can write to with --out"
            ) from exc

    def path(self, rel: str) -> Path:
        """The absolute path of ``rel`` after checking it is a plain path inside the root."""
        parts = PurePosixPath(rel).parts
        if (
            not parts
            or PurePosixPath(rel).is_absolute()
            or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts)
        ):
            raise UnsafePathError(f"refusing to write {rel!r}: not a plain relative path")
        target = self.root.joinpath(*parts)
        current = self.root
        for part in parts[:-1]:
            current = current / part
            if current.is_symlink():
                raise UnsafePathError(f"refusing to write {rel!r}: {current} is a symbolic link")
        if target.is_symlink():
            raise UnsafePathError(f"refusing to write {rel!r}: it is a symbolic link")
        resolved = target.parent.resolve() / target.name
        if not resolved.is_relative_to(self.root):
            raise UnsafePathError(f"refusing to write {rel!r}: outside {self.root}")
        return target

    def write(self, rel: str, text: str) -> bool:
        """Write ``text`` to ``rel`` atomically; returns False when the file already held it."""
        target = self.path(rel)
        data = clean_text(text).encode("utf-8")
        try:
            if target.read_bytes() == data:
                return False
        except FileNotFoundError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(target, data)
        return True

    def read(self, rel: str) -> str | None:
        try:
            return self.path(rel).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def prune(self, rel_dir: str, *, keep: set[str], suffix: str = ".md") -> list[str]:
        """Remove files ending in ``suffix`` directly in ``rel_dir`` that are not in ``keep``
        (names relative to ``rel_dir``); returns the removed relative paths."""
        directory = self.path(rel_dir)
        if not directory.is_dir():
            return []
        removed = []
        for entry in sorted(directory.iterdir()):
            if entry.is_file() and entry.name.endswith(suffix) and entry.name not in keep:
                entry.unlink()
                removed.append(f"{rel_dir}/{entry.name}")
        return removed

    def prune_dirs(self, rel_dir: str, *, keep: set[str]) -> list[str]:
        """Remove sub-directories of ``rel_dir`` not in ``keep`` (generated skills)."""
        directory = self.path(rel_dir)
        if not directory.is_dir():
            return []
        removed = []
        for entry in sorted(directory.iterdir()):
            if entry.is_dir() and not entry.is_symlink() and entry.name not in keep:
                shutil.rmtree(entry)
                removed.append(f"{rel_dir}/{entry.name}")
        return removed

    def remove(self, rel: str) -> bool:
        target = self.path(rel)
        if target.is_dir():
            shutil.rmtree(target)
            return True
        if target.exists():
            target.unlink()
            return True
        return False

    def clean_temporaries(self) -> int:
        """Delete temporaries a killed run left behind."""
        count = 0
        for temp in self.root.rglob(f"{TEMP_PREFIX}*"):
            if temp.is_file() and not temp.is_symlink():
                temp.unlink()
                count += 1
        return count
