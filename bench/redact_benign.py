"""Build tests/fixtures/secrets/benign_strings.tsv: strings sessions are full of that are not
secrets, which redaction must leave byte-identical (tests/transforms/test_redact_benign.py).

Two sources, noted per row:

* ``corpus:<file>``: snippets (the match and up to 40 characters before, 30 after) around git
  SHAs, short SHAs, UUIDs, long hex, numbers, content-hashed paths, base64 images and integrity
  hashes in the public session archives of ``../shared/corpus/rollouts/`` (seeded sample);
* ``computed``: the same shapes made from real digests of fixed inputs (npm/yarn ``integrity``
  lines, webpack/Vite/Next content-hashed asset paths, ``data:image/png;base64`` of real PNG
  bytes, sha256/md5 test-fixture constants, Docker image digests, pip ``--hash`` lines), for
  the classes the corpus holds too few of.

    .venv/bin/python bench/redact_benign.py   # rewrites the fixture
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import struct
import uuid
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "corpus" / "rollouts"
OUT = ROOT / "tests" / "fixtures" / "secrets" / "benign_strings.tsv"
PER_CLASS = 30

CLASSES = {
    "git-sha": r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])",
    "short-sha": r"(?:commit|HEAD is now at|\[main|\[master) [0-9a-f]{7,12}\b",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "base64-image": r"data:image/[a-z]+;base64,[A-Za-z0-9+/]{40,200}",
    "integrity": r"sha(?:1|256|384|512)-[A-Za-z0-9+/]{20,}={0,2}",
    "hash-in-path": (
        r"/[A-Za-z0-9_.-]{0,30}[.-][0-9a-f]{8,20}\.(?:js|css|map|whl|json|py|png|svg|woff2)\b"
    ),
    "long-hex": r"(?<![0-9A-Za-z])(?:[0-9a-f]{64}|[0-9a-f]{32})(?![0-9A-Za-z])",
    "number": r"(?<![\w.])[0-9]{6,20}(?![\w.])",
}


def corpus_rows(rng: random.Random) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    files = sorted(CORPUS.rglob("*.jsonl"))
    for name, pattern in CLASSES.items():
        found: dict[str, str] = {}
        rx = re.compile(pattern)
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            for m in rx.finditer(text):
                snip = text[max(0, m.start() - 40) : m.end() + 30]
                if "\\" in snip or "\t" in snip or "\n" in snip:
                    snip = m.group(0)
                found.setdefault(snip, f"corpus:{path.relative_to(CORPUS)}")
        picked = sorted(found.items())
        rng.shuffle(picked)
        rows += [(name, src, snip) for snip, src in picked[:PER_CLASS]]
    return rows


def _png(width: int, height: int, seed: int) -> bytes:
    raw = b"".join(b"\x00" + bytes((seed * 7 + x * y) % 256 for x in range(width * 3))
                   for y in range(height))  # fmt: skip

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def computed_rows(rng: random.Random) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    pkgs = ["react", "lodash", "typescript", "vite", "esbuild", "zod", "polars", "express",
            "@types/node", "eslint", "prettier", "webpack", "next", "tailwindcss"]  # fmt: skip
    pkgs.append("rollup")
    for i, pkg in enumerate(pkgs):
        blob = f"{pkg}-{i}.{i + 2}.{i * 3}.tgz".encode()
        sri = base64.b64encode(hashlib.sha512(blob).digest()).decode()
        rows.append(("integrity", "computed", f'      "integrity": "sha512-{sri}",'))
        sha1 = hashlib.sha1(blob).hexdigest()
        rows.append(
            (
                "integrity",
                "computed",
                f'  resolved "https://registry.yarnpkg.com/{pkg}/-/{pkg.split("/")[-1]}-{i}.0.0.tgz#{sha1}"',
            )
        )
    for i in range(15):
        h = hashlib.md5(f"chunk{i}".encode()).hexdigest()
        rows.append(
            (
                "hash-in-path",
                "computed",
                f"dist/assets/index-{h[:8]}.js  {40 + i}.12 kB │ gzip: {12 + i}.40 kB",
            )
        )
        rows.append(("hash-in-path", "computed", f"/_next/static/chunks/pages/_app-{h[:16]}.js"))
        rows.append(
            (
                "hash-in-path",
                "computed",
                f"~/.cache/pip/http-v2/{h[0]}/{h[1]}/{h[2]}/{h[3]}/{h[4]}/{h[5:]}",
            )
        )
    for i in range(15):
        png = base64.b64encode(_png(4 + i, 3 + i % 4, i)).decode()
        rows.append(
            ("base64-image", "computed", f'<img src="data:image/png;base64,{png}" alt="icon {i}">')
        )
        rows.append(
            (
                "base64-image",
                "computed",
                f'{{"type": "image_url", "image_url": {{"url": "data:image/png;base64,{png}"}}}}',
            )
        )
    for i in range(15):
        d = hashlib.sha256(f"fixture-{i}".encode()).hexdigest()
        m = hashlib.md5(f"fixture-{i}".encode()).hexdigest()
        rows.append(("long-hex", "computed", f'    assert digest("fixture-{i}") == "{d}"'))
        rows.append(("long-hex", "computed", f"EXPECTED_MD5 = '{m}'"))
        rows.append(("long-hex", "computed", f"ghcr.io/org/app@sha256:{d}"))
        rows.append(("long-hex", "computed", f"requests==2.{i}.0 --hash=sha256:{d}"))
    for _ in range(10):
        u = uuid.UUID(int=rng.getrandbits(128), version=4)
        rows.append(("uuid", "computed", f'{{"id": "{u}", "object": "chat.completion"}}'))
        rows.append(("uuid", "computed", f"Idempotency-Key: {u}"))
    for i in range(10):
        rows.append(("number", "computed", f"TOKEN_LIMIT={2 ** (10 + i % 8)}"))
        rows.append(
            (
                "number",
                "computed",
                f'"max_tokens": {rng.randint(1000, 200000)}, '
                f'"created": {1700000000 + rng.randint(0, 10**8)}',
            )
        )
    return rows


def main() -> int:
    rng = random.Random(13)
    rows = corpus_rows(rng) + computed_rows(rng)
    lines = ["class\tsource\ttext"] + [f"{c}\t{s}\t{t}" for c, s, t in rows]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(rows)} strings -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
