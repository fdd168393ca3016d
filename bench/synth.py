"""Synthetic Codex archive for benchmarks: deterministic, realistic in shape, fast to write.

The archive follows Codex's layout, ``sessions/YYYY/MM/DD/rollout-<ts>-<uuidv7>.jsonl``. Each
file is one session: a ``session_meta`` line (with ~10 KB of ``base_instructions``), then turns
of ``turn_context``, a user message, reasoning items with a base64 ``encrypted_content``
(1-4 KB), ``function_call`` / ``function_call_output`` pairs whose outputs are long log-like
texts (10-200 KB, some non-ASCII characters and ANSI colour codes), many small ``event_msg``
items (``token_count``, ``agent_reasoning``) and assistant messages. A few fake secrets
(``sk-proj-…``, ``ghp_…``, ``AKIA…``, ``password=…``, ``Authorization: Bearer …``, ``.env``
assignments) are sprinkled in, in plain text and inside JSON-escaped function arguments, so
redaction has work to do.

File sizes are log-uniform between 0.2 and 5 MiB. File ``i`` depends only on ``(seed, i)``,
so a larger archive starts with the same files as a smaller one. ``ensure_archive`` reuses an
archive already generated with the same parameters (``manifest.json`` in its directory).

Use from another benchmark::

    from synth import ensure_archive
    archive = ensure_archive(Path("bench/work"), mb=100)  # -> Archive(path, files, bytes, ...)

or from the shell: ``python bench/synth.py --mb 100``.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: Bump when the generated content changes, so old archives are not reused.
GENERATOR_VERSION = 1
MIB = 1 << 20
MIN_FILE = int(0.2 * MIB)
MAX_FILE = 5 * MIB
BASE_TIME = datetime(2025, 9, 1, 8, 0, 0, tzinfo=UTC)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True)
class Archive:
    path: Path  # the archive directory (holds sessions/ and manifest.json)
    files: int
    bytes: int
    seed: int
    mb: int
    seconds: float  # generation time (0 when reused)
    reused: bool


# -- text pools (built once per process from a fixed seed) ------------------------------------

_WORD_TEXT = (
    "build test cache module request handler config parse token stream buffer worker "
    "session commit branch deploy retry timeout socket schema index query record batch "
    "import export render layout widget client server proxy route status migrate lint "
    "format compile bundle assert fixture mock patch merge rebase docker volume network"
)
_WORDS = _WORD_TEXT.split()
_UNICODE = [
    "✓",
    "✗",
    "→",
    "…",
    "é",
    "ü",
    "ñ",
    "日本語",
    "中文",
    "Привет",
    "🚀",
    "⚠",
    "—",
    "°C",
    "µs",
]
_LEVELS = ["INFO", "DEBUG", "WARN", "ERROR", "TRACE"]
_PATHS = [
    "src/app/main.py",
    "src/app/handlers/user.py",
    "web/components/Button.tsx",
    "crates/core/src/lib.rs",
    "tests/test_api.py",
    "pkg/server/http.go",
    "lib/utils/format.ts",
    "docs/README.md",
]
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_POOL: list[str] | None = None


def _log_pool() -> list[str]:
    """~6,000 log-like lines (compiler output, test runs, diffs, JSON logs, tracebacks)."""
    global _POOL
    if _POOL is not None:
        return _POOL
    rng = random.Random(12345)
    lines: list[str] = []
    for i in range(6000):
        kind = rng.randrange(10)
        words = " ".join(rng.choices(_WORDS, k=rng.randint(3, 14)))
        path = rng.choice(_PATHS)
        if rng.random() < 0.08:
            words += " " + rng.choice(_UNICODE)
        if kind == 0:
            lines.append(
                f"2025-10-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z "
                f"{rng.choice(_LEVELS):5} [{rng.choice(_WORDS)}] {words}"
            )
        elif kind == 1:
            lines.append(f"{path}:{rng.randint(1, 900)}:{rng.randint(1, 80)}: error: {words}")
        elif kind == 2:
            status = rng.choice(["PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"])
            lines.append(f"tests/test_{rng.choice(_WORDS)}.py::test_{i} {status} [{i % 100:3d}%]")
        elif kind == 3:
            lines.append(f"{rng.choice('+- ')}    {words} = {rng.randint(0, 10**6)}")
        elif kind == 4:
            lines.append(
                json.dumps(
                    {"level": rng.choice(_LEVELS).lower(), "msg": words, "ms": rng.random() * 50},
                    ensure_ascii=False,
                )
            )
        elif kind == 5:
            lines.append(f'  File "/home/dev/{path}", line {rng.randint(1, 500)}, in {words[:20]}')
        elif kind == 6:
            lines.append(f"\x1b[32m✓\x1b[0m {words} ({rng.randint(1, 900)} ms)")
        elif kind == 7:
            lines.append(
                f"drwxr-xr-x  {rng.randint(1, 9)} dev staff  {rng.randint(64, 9999)} {path}"
            )
        else:
            lines.append(f"    {words}")
    _POOL = lines
    return lines


def _secret(rng: random.Random) -> str:
    kind = rng.randrange(7)
    alnum = lambda n: "".join(rng.choices(_ALNUM, k=n))  # noqa: E731
    if kind == 0:
        return f"OPENAI_API_KEY=sk-proj-{alnum(40)}"
    if kind == 1:
        return f"remote: using token ghp_{alnum(36)} for push"
    if kind == 2:
        return f"aws_access_key_id AKIA{''.join(rng.choices(_UPPER_ALNUM, k=16))} region us-east-1"
    if kind == 3:
        return f"db connect password={alnum(6)}{rng.randint(10, 99)}!{alnum(4)} host=db.internal"
    if kind == 4:
        return f"curl -H 'Authorization: Bearer {alnum(12)}.{alnum(30)}' https://api.example.com"
    if kind == 5:
        return f"DATABASE_URL=postgres://app:{alnum(10)}{rng.randint(0, 9)}@db.internal:5432/app"
    return f"export GITHUB_TOKEN=ghp_{alnum(36)}"


def _log_text(rng: random.Random, nbytes: int, secrets: int) -> str:
    pool = _log_pool()
    n = max(1, nbytes // 60)
    chosen = rng.choices(pool, k=n)
    for _ in range(secrets):
        chosen.insert(rng.randrange(len(chosen) + 1), _secret(rng))
    return "\n".join(chosen)


def _prose(rng: random.Random, nwords: int) -> str:
    words = rng.choices(_WORDS, k=nwords)
    if rng.random() < 0.3:
        words.append(rng.choice(_UNICODE))
    return " ".join(words).capitalize() + "."


def _uuid7(rng: random.Random, ms: int) -> str:
    h = f"{ms:012x}"
    r = rng.getrandbits(74)
    var = 0x8 | (r >> 72)
    return (
        f"{h[:8]}-{h[8:12]}-7{(r >> 60) & 0xFFF:03x}-{var:x}{(r >> 48) & 0xFFF:03x}-"
        f"{r & 0xFFFFFFFFFFFF:012x}"
    )


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


_BASE_INSTRUCTIONS: str | None = None


def _base_instructions() -> str:
    global _BASE_INSTRUCTIONS
    if _BASE_INSTRUCTIONS is None:
        rng = random.Random(7)
        parts = [
            "You are Codex, a coding agent based on GPT-5. You and the user share a workspace."
        ]
        while sum(len(p) for p in parts) < 10_000:
            parts.append("## " + _prose(rng, 3) + "\n\n- " + _prose(rng, rng.randint(10, 40)))
        _BASE_INSTRUCTIONS = "\n\n".join(parts)
    return _BASE_INSTRUCTIONS


def _token_count(rng: random.Random, ts: str, used: int) -> str:
    last = rng.randint(200, 9000)
    usage = {
        "input_tokens": used,
        "cached_input_tokens": used - last,
        "output_tokens": rng.randint(10, 900),
        "reasoning_output_tokens": rng.randint(0, 400),
        "total_tokens": used + 500,
    }
    return _dumps(
        {
            "timestamp": ts,
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "total_token_usage": usage,
                    "last_token_usage": {**usage, "input_tokens": last},
                    "model_context_window": 258400,
                },
                "rate_limits": {
                    "primary": {"used_percent": rng.randint(0, 99) * 1.0, "window_minutes": 300},
                    "secondary": {
                        "used_percent": rng.randint(0, 99) * 1.0,
                        "window_minutes": 10080,
                    },
                    "credits": {"has_credits": False, "unlimited": False, "balance": None},
                    "plan_type": None,
                },
            },
        }
    )


def render_rollout(seed: int, index: int) -> tuple[str, bytes]:
    """File ``index`` of the archive for ``seed``: ``(relative path, content)``."""
    rng = random.Random(f"memkiln-synth-{seed}-{index}")
    target = int(math.exp(rng.uniform(math.log(MIN_FILE), math.log(MAX_FILE))))
    start = BASE_TIME + timedelta(hours=3 * index, seconds=rng.randint(0, 7200))
    ms = int(start.timestamp() * 1000)
    sid = _uuid7(rng, ms)
    repo = rng.choice(["acme/webshop", "acme/billing", "oss/parser", "me/dotfiles", "oss/engine"])
    cwd = f"/home/dev/src/{repo.split('/')[1]}"
    t = start
    step = lambda lo, hi: t + timedelta(milliseconds=rng.randint(lo, hi))  # noqa: E731

    lines: list[str] = [
        _dumps(
            {
                "timestamp": _iso(t),
                "type": "session_meta",
                "payload": {
                    "id": sid,
                    "timestamp": _iso(t),
                    "cwd": cwd,
                    "originator": "codex_cli_rs",
                    "cli_version": f"0.{rng.randint(40, 140)}.{rng.randint(0, 3)}",
                    "source": "cli",
                    "git": {
                        "commit_hash": f"{rng.getrandbits(160):040x}",
                        "branch": rng.choice(["main", "dev", f"feature/{rng.choice(_WORDS)}"]),
                        "repository_url": f"git@github.com:{repo}.git",
                    },
                    "base_instructions": {"text": _base_instructions()},
                },
            }
        )
    ]
    size = len(lines[0])
    secrets_left = rng.randint(3, 8)
    used = 3000
    call = 0
    while size < target:
        t = step(5_000, 600_000)
        turn: list[str] = [
            _dumps(
                {
                    "timestamp": _iso(t),
                    "type": "turn_context",
                    "payload": {
                        "cwd": cwd,
                        "approval_policy": "on-request",
                        "sandbox_policy": {"type": "workspace-write", "network_access": False},
                        "model": "gpt-5-codex",
                        "effort": rng.choice(["low", "medium", "high"]),
                        "summary": "auto",
                    },
                }
            )
        ]
        ask = _prose(rng, rng.randint(15, 300))
        if secrets_left and rng.random() < 0.2:
            ask += " Use " + _secret(rng) + " for this."
            secrets_left -= 1
        turn.append(
            _dumps(
                {
                    "timestamp": _iso(t),
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": ask}],
                    },
                }
            )
        )
        turn.append(
            _dumps(
                {
                    "timestamp": _iso(t),
                    "type": "event_msg",
                    "payload": {"type": "user_message", "message": ask, "images": []},
                }
            )
        )
        for _ in range(rng.randint(1, 12)):
            t = step(200, 20_000)
            blob = base64.urlsafe_b64encode(rng.randbytes(rng.randint(768, 3072))).decode()
            turn.append(
                _dumps(
                    {
                        "timestamp": _iso(t),
                        "type": "response_item",
                        "payload": {
                            "type": "reasoning",
                            "summary": [{"type": "summary_text", "text": _prose(rng, 20)}],
                            "content": None,
                            "encrypted_content": "gAAAAA" + blob,
                        },
                    }
                )
            )
            turn.append(
                _dumps(
                    {
                        "timestamp": _iso(t),
                        "type": "event_msg",
                        "payload": {"type": "agent_reasoning", "text": _prose(rng, 25)},
                    }
                )
            )
            call += 1
            call_id = f"call_{index:05d}_{call:05d}_{rng.getrandbits(40):010x}"
            command = f"cd {cwd} && {rng.choice(['pytest -q', 'cargo test', 'npm run build'])}"
            if secrets_left and rng.random() < 0.15:
                command += f" && {_secret(rng)}"
                secrets_left -= 1
            turn.append(
                _dumps(
                    {
                        "timestamp": _iso(t),
                        "type": "response_item",
                        "payload": {
                            "type": "function_call",
                            "name": "shell_command",
                            "arguments": _dumps({"command": command, "timeout_ms": 120000}),
                            "call_id": call_id,
                        },
                    }
                )
            )
            out_bytes = int(math.exp(rng.uniform(math.log(10_000), math.log(200_000))))
            n_secrets = 1 if secrets_left and rng.random() < 0.3 else 0
            secrets_left -= n_secrets
            output = (
                f"Exit code: {rng.choice([0, 0, 0, 1])}\nWall time: {rng.randint(1, 90)} seconds\n"
                f"Output:\n{_log_text(rng, out_bytes, n_secrets)}"
            )
            t = step(100, 90_000)
            turn.append(
                _dumps(
                    {
                        "timestamp": _iso(t),
                        "type": "response_item",
                        "payload": {
                            "type": "function_call_output",
                            "call_id": call_id,
                            "output": output,
                        },
                    }
                )
            )
            for _ in range(rng.randint(2, 6)):
                used += rng.randint(200, 9000)
                turn.append(_token_count(rng, _iso(t), used))
            if size + sum(len(x) for x in turn) >= target:
                break
        t = step(500, 30_000)
        answer = _prose(rng, rng.randint(20, 400))
        turn.append(
            _dumps(
                {
                    "timestamp": _iso(t),
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": answer}],
                    },
                }
            )
        )
        turn.append(
            _dumps(
                {
                    "timestamp": _iso(t),
                    "type": "event_msg",
                    "payload": {"type": "agent_message", "message": answer},
                }
            )
        )
        turn.append(_token_count(rng, _iso(t), used))
        lines.extend(turn)
        size += sum(len(x) + 1 for x in turn)

    name = f"rollout-{start.strftime('%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl"
    rel = f"sessions/{start:%Y/%m/%d}/{name}"
    return rel, ("\n".join(lines) + "\n").encode("utf-8")


# -- archive ------------------------------------------------------------------------------------


def archive_dir(work: Path, mb: int, seed: int) -> Path:
    return work / f"codex-{mb}mb-seed{seed}"


def ensure_archive(work: Path, mb: int, *, seed: int = 0, log=print) -> Archive:  # type: ignore[no-untyped-def]
    """Generate (or reuse) an archive of at least ``mb`` MiB under ``work``."""
    root = archive_dir(work, mb, seed)
    manifest_path = root / "manifest.json"
    params = {"generator_version": GENERATOR_VERSION, "seed": seed, "mb": mb}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if {k: manifest.get(k) for k in params} == params and _matches(root, manifest):
            return Archive(root, manifest["files"], manifest["bytes"], seed, mb, 0.0, True)
        log(f"synth: {root} is stale or incomplete; regenerating")
    if root.exists():
        shutil.rmtree(root)
    t0 = time.perf_counter()
    total = 0
    index = 0
    made_dirs: set[Path] = set()
    while total < mb * MIB:
        rel, data = render_rollout(seed, index)
        path = root / rel
        if path.parent not in made_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            made_dirs.add(path.parent)
        path.write_bytes(data)
        total += len(data)
        index += 1
    seconds = time.perf_counter() - t0
    manifest_path.write_text(json.dumps({**params, "files": index, "bytes": total}, indent=2))
    return Archive(root, index, total, seed, mb, seconds, False)


def _matches(root: Path, manifest: dict) -> bool:  # type: ignore[type-arg]
    files = 0
    total = 0
    for dirpath, _dirs, names in os.walk(root / "sessions"):
        for name in names:
            if name.endswith(".jsonl"):
                files += 1
                total += os.path.getsize(os.path.join(dirpath, name))
    return files == manifest.get("files") and total == manifest.get("bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a synthetic Codex rollout archive.")
    parser.add_argument("--mb", type=int, default=100, help="size target in MiB (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--work", type=Path, default=Path(__file__).parent / "work", help="work directory"
    )
    args = parser.parse_args(argv)
    a = ensure_archive(args.work, args.mb, seed=args.seed)
    how = "reused" if a.reused else f"generated in {a.seconds:.1f} s"
    print(f"{a.path}: {a.files} files, {a.bytes / MIB:.1f} MiB ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
