"""Secrets, end to end: canaries of every secret format memkiln claims to redact are placed
everywhere a session can carry them (user text, tool arguments, tool output, assistant text,
JSON-escaped and ``\\u``-escaped strings, folder and file names, the cwd, the git remote, lines
that end in quarantine), then the whole job runs as a user runs it (the ``memkiln`` console
script, ``memkiln run``) with each backend. Afterwards everything memkiln wrote is scanned:
every text column of every table, every file and file name under ``--out``, Prefect's
database and artifacts, and the captured output. Not one canary may remain."""

from __future__ import annotations

import codecs
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import fresh_prefect_home
from tests.fake_openai import FakeOpenAI
from tests.pipeline.test_no_secret_survives import store_texts
from tests.prefect_server import prefect_api_server
from tests.transforms.test_redact import FIXTURE_SECRETS, ORDINARY, Fixture

SESSION = "019c1111-0000-7000-8000-000000000001"
CLAUDE_SESSION = "5f0c1111-0000-4000-8000-000000000002"
AT = "2026-01-02T03:04:05.000Z"
#: Canaries that can be part of a file name (no slash, no blank, not too long).
NAMEABLE = [fx for fx in FIXTURE_SECRETS if re.fullmatch(r"[A-Za-z0-9_\-.+=]{16,120}", fx.secret)]


def memkiln_script() -> str:
    """The installed console script, as a user calls it."""
    return str(Path(sys.executable).with_name("memkiln"))


def escaped(text: str) -> str:
    """A JSON string body with every other letter or digit written as a ``\\u`` escape (line
    breaks stay ``\\n``)."""
    body = json.dumps(text)[1:-1]
    out, flip = [], False
    for piece in re.findall(r"\\u[0-9a-f]{4}|\\.|.", body):  # escapes stay whole
        if piece.isalnum():
            flip = not flip
            out.append(f"\\u{ord(piece):04x}" if flip else piece)
        else:
            out.append(piece)
    return "".join(out)


def item(payload: dict[str, object]) -> str:
    return json.dumps({"timestamp": AT, "type": "response_item", "payload": payload})


def codex_session(fixtures: list[Fixture], cwd: str, remote: str) -> list[str]:
    meta = {"timestamp": AT, "type": "session_meta",
            "payload": {"id": SESSION, "timestamp": AT, "cwd": cwd, "source": "cli",
                        "originator": "codex-tui", "cli_version": "0.140.0",
                        "git": {"repository_url": remote, "branch": "main"}}}  # fmt: skip
    lines = [
        json.dumps(meta),
        item({"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "\n".join(ORDINARY)}]}),
    ]  # fmt: skip
    for i, fx in enumerate(fixtures):
        arguments = json.dumps({"command": ["bash", "-lc", f"echo '{fx.text}' >> .env"],
                                "body": json.dumps({fx.key: fx.value})})  # fmt: skip
        lines += [
            item({"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": f"please use this:\n{fx.text}"}]}),
            item({"type": "function_call", "name": "shell", "call_id": f"c{i}",
                  "arguments": arguments}),
            item({"type": "function_call_output", "call_id": f"c{i}",
                  "output": f"Exit code: 0\nOutput:\n{fx.text}\n" + json.dumps({fx.key: fx.value})}),
            item({"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": f"Stored {fx.text} in .env."}]}),
            # the secret spelled with \u escapes, once in a string and once a string deeper
            '{"timestamp":"' + AT + '","type":"response_item","payload":{"type":"message",'
            '"role":"user","content":[{"type":"input_text","text":"again: '
            + escaped(fx.text) + '"}]}}',
            '{"timestamp":"' + AT + '","type":"response_item","payload":{"type":"function_call",'
            '"name":"shell","call_id":"e' + str(i) + '","arguments":'
            + json.dumps('{"cmd":"' + escaped(fx.text) + '"}') + "}}",
        ]  # fmt: skip
    lines += [
        # what ends in quarantine: a broken line and a line that is not UTF-8
        '{"timestamp":"' + AT + '","broken": "' + fixtures[0].secret,
        item({"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "All done, the tests pass."}]}),
    ]  # fmt: skip
    return lines


def claude_session(fixtures: list[Fixture], cwd: str) -> list[str]:
    lines = []
    for i, fx in enumerate(fixtures):
        base = {"sessionId": CLAUDE_SESSION, "cwd": cwd, "timestamp": AT, "gitBranch": "main"}
        lines += [
            json.dumps({**base, "type": "user", "message": {"role": "user", "content": f"set {fx.text}"}}),
            json.dumps({**base, "type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "text", "text": f"Setting {fx.text}"},
                {"type": "tool_use", "id": f"tu{i}", "name": "Bash",
                 "input": {"command": f"echo '{fx.text}'"}}]}}),
            json.dumps({**base, "type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"tu{i}", "content": fx.text}]}}),
        ]  # fmt: skip
    return lines


def build_archive(root: Path) -> Path:
    archive = root / "archive"
    named = NAMEABLE[:4]
    folder = archive / "sessions" / f"token={named[0].secret}" / named[1].secret
    folder.mkdir(parents=True)
    cwd = f"/home/dev/{named[2].secret}/shop"
    remote = f"https://ci:{FIXTURE_SECRETS[0].secret}@github.com/acme/shop.git"
    codex = folder / f"rollout-2026-01-02T03-04-05-{named[3].secret}-{SESSION}.jsonl"
    lines = codex_session(FIXTURE_SECRETS, cwd, remote)
    data = ("\n".join(lines) + "\n").encode()
    # a line that is not valid UTF-8, an invalid byte inside the secret
    secret = FIXTURE_SECRETS[1].secret.encode()
    data += b'{"note":"' + secret[:12] + b"\xff" + secret[12:] + b'"}\n'
    codex.write_bytes(data)
    claude_dir = archive / "claude" / f"-home-dev-{named[2].secret}-shop"
    claude_dir.mkdir(parents=True)
    claude = claude_session(FIXTURE_SECRETS[:20], cwd)
    (claude_dir / f"{CLAUDE_SESSION}.jsonl").write_text("\n".join(claude) + "\n")
    return archive


def decoded_forms(text: str) -> Iterator[str]:
    yield text
    if "\\u" in text or "\\\\" in text:
        for _ in range(2):
            try:
                with warnings.catch_warnings():  # "invalid escape sequence" for \[ and such
                    warnings.simplefilter("ignore", DeprecationWarning)
                    text = codecs.decode(text, "unicode_escape")
            except (UnicodeDecodeError, ValueError):
                return
            yield text


def strings_of(value: object) -> Iterator[str]:
    """Every string inside a JSON value (a request body: the messages sent)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from strings_of(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from strings_of(inner)


def written_texts(root: Path) -> Iterator[tuple[str, str]]:
    """Every file under ``root`` and its name, as text (binary files decoded leniently)."""
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        yield f"name:{rel}", rel
        if path.is_file() and not path.is_symlink():
            yield f"file:{rel}", path.read_bytes().decode("utf-8", errors="replace")


def leaks(texts: list[tuple[str, str]]) -> list[str]:
    forms = {o for o in ORDINARY} | {json.dumps(o, ensure_ascii=False)[1:-1] for o in ORDINARY}
    # a needle that ordinary text holds too (a webhook host) proves nothing where that text
    # may be stored in another encoding (Prefect's database)
    needles = {
        fx.name: [n for n in fx.needles if not any(n in o for o in ORDINARY)]
        for fx in FIXTURE_SECRETS
    }
    found = []
    for where, text in texts:
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "")
        for variant in decoded_forms(text):
            for fx in FIXTURE_SECRETS:
                hit = next((n for n in needles[fx.name] if n in variant), None)
                if hit:
                    found.append(f"{fx.name}: {hit[:24]!r}… in {where}")
    return sorted(set(found))


@dataclass
class PrefectServer:
    """The Prefect API server the module's runs talk to, and its home (scanned after each
    run: its database holds what every run of the module sent it)."""

    home: Path
    api_url: str | None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    home = fresh_prefect_home(tmp_path_factory.mktemp("prefect-server"), tmp_path_factory)
    with prefect_api_server(home) as url:
        yield PrefectServer(home, url)


def run_job(
    root: Path, archive: Path, home: Path, server: PrefectServer, *extra: str
) -> tuple[Path, Path, Path, str]:
    """A whole run with its own Prefect home ``home`` against ``server`` (both scanned
    afterwards)."""
    db, out = root / "m.duckdb", root / "memories"
    env = {
        **os.environ,
        **({"PREFECT_API_URL": server.api_url} if server.api_url else {}),
        "PREFECT_HOME": str(home),
        "MEMKILN_HOME": str(home),
        "OPENAI_API_KEY": "local-test-key",
        # a loaded CI machine can be slow to start Prefect's temporary server
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",
    }
    result = subprocess.run(
        [memkiln_script(), "run", "--archive", str(archive), "--db", str(db), "--out", str(out),
         "--backfill", "--min-idle-hours", "0", "--no-progress", *extra],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return db, out, home, result.stdout + "\n" + result.stderr


def scan_everything(
    db: Path, out: Path, home: Path, captured: str, server: PrefectServer
) -> list[str]:
    texts = [*store_texts(db), ("captured output", captured)]
    texts += list(written_texts(out))
    texts += list(written_texts(home))  # the run's Prefect home: logs, results
    texts += list(written_texts(server.home))  # Prefect's sqlite database (and its WAL)
    return leaks(texts)


#: A token in the folder the user names with ``--archive`` (above the canaries' folders).
PATH_TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_archive(tmp_path_factory.mktemp("secrets") / f"token={PATH_TOKEN}")


def test_every_canary_format_is_placed_in_every_field(archive: Path) -> None:
    assert len(FIXTURE_SECRETS) >= 60 and len(NAMEABLE) >= 4
    raw = "\n".join(p.read_bytes().decode("utf-8", "replace") for p in archive.rglob("*.jsonl"))
    names = "\n".join(str(p) for p in archive.rglob("*"))
    assert all(fx.secret.splitlines()[0] in raw for fx in FIXTURE_SECRETS)
    assert all(fx.secret in names for fx in NAMEABLE[:4])


def test_no_canary_survives_a_heuristic_run_nor_the_token_in_the_archive_path(
    archive: Path, tmp_path: Path, prefect_home: Path, server: PrefectServer
) -> None:
    assert f"token={PATH_TOKEN}" in str(archive.parent)
    db, out, home, captured = run_job(
        tmp_path, archive, prefect_home, server, "--backend", "heuristic"
    )
    assert (out / "INDEX.md").is_file()
    assert scan_everything(db, out, home, captured, server) == []
    # the canaries sit in folders below the archive; a token in the folder the user names
    # with --archive reached Prefect's database in clear, in the flow runs' stored
    # parameters and in the ingest task's name
    held = [
        str(path)
        for root in (home, server.home)
        for path in sorted(root.rglob("*"))
        if path.is_file() and PATH_TOKEN.encode() in path.read_bytes()
    ]
    assert held == []
    assert PATH_TOKEN not in captured


def test_no_canary_survives_a_run_against_an_openai_compatible_server(
    archive: Path, tmp_path: Path, prefect_home: Path, server: PrefectServer
) -> None:
    with FakeOpenAI() as fake:
        db, out, home, captured = run_job(
            tmp_path, archive, prefect_home, server, "--backend", "openai", "--base-url", fake.base_url,
            "--model", "fake-model",
        )  # fmt: skip
        prompts = [("request", text) for r in fake.requests for text in strings_of(r["body"])]
    assert prompts, "the model got no request"
    assert (out / "INDEX.md").is_file()
    assert leaks(prompts) == []
    assert scan_everything(db, out, home, captured, server) == []


def test_no_canary_survives_a_run_that_reads_the_session_in_chunks(
    archive: Path, tmp_path: Path, prefect_home: Path, server: PrefectServer
) -> None:
    """The same archive through a 20,000-token window: the Codex session is over the budget,
    so it is sent in chunks of turns and one more request merges their answers."""
    from tests.fake_openai import last_user_text

    with FakeOpenAI() as fake:
        db, out, home, captured = run_job(
            tmp_path, archive, prefect_home, server, "--backend", "openai", "--base-url",
            fake.base_url, "--model", "fake-model", "--context-window", "20000",
        )  # fmt: skip
        prompts = [("request", text) for r in fake.requests for text in strings_of(r["body"])]
        merges = [r for r in fake.requests if "<partial_memories>" in last_user_text(r["body"])]
    assert merges, "no session was read in chunks"
    assert (out / "INDEX.md").is_file()
    assert leaks(prompts) == []
    assert scan_everything(db, out, home, captured, server) == []
