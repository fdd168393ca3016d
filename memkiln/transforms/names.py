"""Names of memory files and folders: stable, readable, and safe to write.

Summary file stems follow Codex's rule so the two tools' folders line up:
``<time>-<hash4>[-<slug>]``. No name produced here can contain a path separator, ``..`` or
a leading dot, whatever the input or the model's answer.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime, timedelta

BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
HASH_SPACE = 62**4
SLUG_MAX = 60
#: 100-ns intervals between the Gregorian epoch (UUID v1/v6) and the Unix epoch.
_GREGORIAN_OFFSET = 0x01B21DD213814000


def uuid_time(rollout_id: str) -> datetime | None:
    """The UTC time embedded in a UUIDv7, v6 or v1 id; None for other ids."""
    try:
        u = uuid.UUID(rollout_id)
    except ValueError:
        return None
    if u.version == 7:
        return datetime.fromtimestamp((u.int >> 80) / 1000, UTC)
    if u.version == 6:
        ticks = ((u.int >> 96) << 28) | (((u.int >> 80) & 0xFFFF) << 12) | ((u.int >> 64) & 0x0FFF)
    elif u.version == 1:
        ticks = u.time
    else:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=(ticks - _GREGORIAN_OFFSET) // 10
    )


def hash4(rollout_id: str) -> str:
    """Four base-62 digits: the UUID's low 32 bits (else a x31 rolling hash) mod 62^4."""
    try:
        value = uuid.UUID(rollout_id).int & 0xFFFFFFFF
    except ValueError:
        value = 0
        for ch in rollout_id:
            value = (value * 31 + ord(ch)) & 0xFFFFFFFF
    value %= HASH_SPACE
    digits = []
    for _ in range(4):
        value, rem = divmod(value, 62)
        digits.append(BASE62[rem])
    return "".join(reversed(digits))


def sanitize_slug(slug: str | None) -> str:
    """ASCII letters and digits lower-cased, anything else ``_``, at most 60 characters,
    trailing ``_`` removed ("" when nothing is left)."""
    if not slug:
        return ""
    out = "".join(c.lower() if c.isascii() and c.isalnum() else "_" for c in slug)
    return out[:SLUG_MAX].rstrip("_")


def summary_stem(rollout_id: str, updated_at: datetime | None, slug: str | None) -> str:
    """``<YYYY-MM-DDTHH-MM-SS>-<hash4>[-<slug>]`` for a rollout's summary file."""
    at = uuid_time(rollout_id) or updated_at or datetime(1970, 1, 1, tzinfo=UTC)
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H-%M-%S")
    clean = sanitize_slug(slug)
    return f"{stamp}-{hash4(rollout_id)}" + (f"-{clean}" if clean else "")


def project_dirname(project_key: str) -> str:
    """A folder name for a project: readable, unique per key, safe on every file system."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", project_key).strip("-.")[:80].strip("-.")
    digest = hashlib.blake2b(project_key.encode(), digest_size=3).hexdigest()
    return f"{readable or 'project'}-{digest}"


def skill_dirname(name: str) -> str | None:
    """A skill's folder name from a model's answer, or None when nothing safe is left."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:64].strip("-")
    return clean or None
