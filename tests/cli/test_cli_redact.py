"""``memkiln redact``, run as a user runs it: the console script, stdin or files, ``--stats``."""

from __future__ import annotations

import json
import random
import string
import subprocess
import sys
from pathlib import Path

REDACTED = "[REDACTED_SECRET]"


def memkiln(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    script = str(Path(sys.executable).with_name("memkiln"))
    return subprocess.run([script, *args], input=stdin, capture_output=True, timeout=120)


def _value(seed: str) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(30)) + "7Q"


def test_stdin_to_stdout_with_stats(tmp_path: Path) -> None:
    key, token = _value("key"), "ghp_" + _value("gh")[:36]
    text = (
        f"export ADAFRUIT_IO_KEY={key}\n"
        f"git push https://{token}@github.com/o/r.git\n"
        "commit 3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e\n"
        "ünïcode line, no newline at the end"
    )
    done = memkiln("redact", "--stats", stdin=text.encode())
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert key not in out and token not in out
    expected = text.replace(key, REDACTED).replace(token, REDACTED)
    assert out == expected  # everything else byte for byte, final line break or not
    stats = done.stderr.decode()
    # Betterleaks' Adafruit rule runs before memkiln's key-word rule and takes the key
    assert "betterleaks:adafruit-api-key" in stats and "github-token" in stats
    assert "2  secrets redacted" in stats


def test_files_in_order_and_json_stays_valid(tmp_path: Path) -> None:
    secret = _value("json")
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.log"
    a.write_text(json.dumps({"output": f'{{"api_key": "{secret}"}}'}) + "\n", encoding="utf-8")
    b.write_text("plain line\n", encoding="utf-8")
    done = memkiln("redact", str(a), str(b))
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.decode().splitlines()
    assert secret not in first and json.loads(first)["output"] == f'{{"api_key": "{REDACTED}"}}'
    assert second == "plain line"
    assert done.stderr == b""  # no --stats: nothing on stderr


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    done = memkiln("redact", str(tmp_path / "nope.log"))
    assert done.returncode == 2
    assert b"no such file" in done.stderr


def test_a_folder_is_a_usage_error_that_says_it_is_a_folder(tmp_path: Path) -> None:
    done = memkiln("redact", str(tmp_path))
    assert done.returncode == 2
    assert b"a folder, not a file" in done.stderr and b"no such file" not in done.stderr
