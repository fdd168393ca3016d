"""Hostile archives: sessions, file names and compressed files that once stopped a whole run.

Writes an archive holding good sessions beside

- sessions whose timestamps are out of range (year 0), far in the future (2031, 9999),
  without a zone, or garbage;
- a session file whose name is not UTF-8 (``caf\\xe9.jsonl``, bytes as an old zip or a macOS
  copy leaves them);
- compressed bombs and long lines: a ``.jsonl.zst`` of zeros, a ``.jsonl.gz`` of a repeated
  line, a plain file holding one very long line beside good lines;
- two sessions in two different long working directories (made only of the base64
  alphabet, so they look like an inline image to the blob rule);

then runs ``memkiln run --backfill`` on it through the console script, as a user would
(``MEMKILN_*`` variables, Prefect off or on), under ``/usr/bin/time -v``, and prints a table:
the exit code, the lines that say what was set aside, whether a traceback appeared, the
projects and session summaries written, and the peak RSS. Run from the repository root:

    python bench/hostile.py                     # full sizes: 2 GiB zst, 1 GiB gz, 300 MB line
    python bench/hostile.py --small             # the same shapes, small (seconds)
    python bench/hostile.py --write-only DIR    # only write the archive to DIR
    python bench/hostile.py --each              # each input alone (and 100 MiB sessions)

``--each`` runs every input alone in an archive beside one good session, Prefect off and on:
the bombs and the long line above, and sessions of real shape (``bench/synth.py``: reasoning
blobs, long tool outputs, secrets) of 100 MiB, plain and ``.zst``, and of 500 and 1000 MiB
(extraction reads such a session in pieces and holds its ends: ``memkiln.io.session_items``),
and eight sessions of 30, 60 or 100 MiB together (a 60 MiB one is just under four windows, so
it is held whole). It checks that the good session, and a large session, have their memory
written and that every line of the large session is stored (its last item too). With
``--model``, the runs extract with the ``openai`` backend against the local test server
(``tests/fake_openai.py``), so that large sessions are sent in chunks:

    python bench/hostile.py --each sessions-8x60MiB --model
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.builders import codex_lines, uid, write_rollout  # noqa: E402

MEMKILN = str(Path(sys.executable).with_name("memkiln"))
GOOD_SESSIONS = 6
#: Timestamps a session may carry that once stopped a run, by name.
BAD_TIMESTAMPS = {
    "year0": "0000-01-01T00:00:00Z",
    "year9999": "9999-12-31T23:59:59Z",
    "future2031": "2031-06-01T10:00:00Z",
    "no_zone": "2026-10-02T10:00:00",
    "garbage": "yesterday at noon",
}
#: The long working directories (601 characters of the base64 alphabet) of point 6.
LONG_CWDS = ("/home/dev/" + "a" * 600, "/home/dev/" + "b" * 600)


def session_lines(n: int, at: datetime, **kw: object) -> list[dict[str, object]]:
    return codex_lines(
        uid(n),
        request=f"Task {n}: make the checkout page show the tax line; always run the linter first",
        at=at,
        calls=[("npm run lint", "Exit code: 0\nOutput:\nno problems")],
        **kw,  # type: ignore[arg-type]
    )


def with_timestamp(lines: list[dict[str, object]], stamp: str) -> list[dict[str, object]]:
    """Every line of a session with ``stamp`` as its timestamp (the header's too)."""
    out = []
    for line in lines:
        line = dict(line)
        line["timestamp"] = stamp
        if line["type"] == "session_meta":
            line["payload"] = {**line["payload"], "timestamp": stamp}  # type: ignore[dict-item]
        out.append(line)
    return out


def write_archive(archive: Path, *, small: bool) -> dict[str, list[str]]:
    """Write the hostile archive; return the names of what it holds, by kind."""
    start = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    kinds: dict[str, list[str]] = {"good": [], "bad": []}
    for i in range(GOOD_SESSIONS):
        at = start + timedelta(hours=i)
        write_rollout(archive, uid(i), session_lines(i, at), at)
        kinds["good"].append(uid(i))
    n = 100
    for name, stamp in BAD_TIMESTAMPS.items():  # 1. timestamps
        at = start + timedelta(days=1, hours=n - 100)
        path = write_rollout(archive, uid(n), with_timestamp(session_lines(n, at), stamp), at)
        kinds["bad"].append(f"timestamp {name}: {path.name}")
        n += 1
    weird = archive / "old-zip"  # 2. a file name that is not UTF-8
    weird.mkdir(parents=True, exist_ok=True)
    at = start + timedelta(days=2)
    body = "".join(json.dumps(x) + "\n" for x in session_lines(n, at)).encode()
    name = b"caf\xe9-" + uid(n).encode() + b".jsonl"
    with open(os.path.join(os.fsencode(weird), name), "wb") as fh:
        fh.write(body)
    kinds["bad"].append("file name caf\\xe9")
    kinds["good"].append(uid(n))  # its session is good: it is read by its bytes
    n += 1
    bombs = archive / "bombs"  # 3. decompression bombs and a long line
    bombs.mkdir(parents=True, exist_ok=True)
    zeros = (64 if small else 2048) * 1024 * 1024
    zst = zstandard.ZstdCompressor(level=19).compressobj()
    with open(bombs / "zeros.jsonl.zst", "wb") as fh:
        block = b"\0" * (16 * 1024 * 1024)
        for _ in range(zeros // len(block)):
            fh.write(zst.compress(block))
        fh.write(zst.flush())
    kinds["bad"].append(f"zst of {zeros >> 20} MiB of zeros")
    repeated = (32 if small else 1024) * 1024 * 1024
    line = json.dumps({"type": "noise", "payload": {"text": "x" * 200}}).encode() + b"\n"
    with gzip.open(bombs / "repeated.jsonl.gz", "wb", compresslevel=9) as gz:
        block = line * ((1024 * 1024) // len(line))
        for _ in range(repeated // len(block)):
            gz.write(block)
    kinds["bad"].append(f"gz of {repeated >> 20} MiB of one repeated line")
    long_line = (16 if small else 300) * 1000 * 1000
    at = start + timedelta(days=3)
    lines = session_lines(n, at)
    with open(write_rollout(archive, uid(n), lines, at), "ab") as fh:
        fh.write(
            b'{"timestamp":"2026-10-04T09:00:00Z","type":"response_item","payload":'
            b'{"type":"message","role":"user","content":[{"type":"input_text","text":"'
        )
        fh.write(b"y" * long_line)
        fh.write(b'"}]}}\n')
        fh.write((json.dumps(lines[-1]) + "\n").encode())
    kinds["bad"].append(f"one line of {long_line // 1_000_000} MB")
    kinds["good"].append(uid(n))  # the rest of its file is kept
    n += 1
    for cwd in LONG_CWDS:  # 6. long working directories
        at = start + timedelta(days=4, hours=n)
        write_rollout(archive, uid(n), session_lines(n, at, cwd=cwd, remote=None), at)
        kinds["good"].append(uid(n))
        n += 1
    return kinds


def run_memkiln(
    archive: Path, work: Path, *, prefect: bool, model_url: str | None = None
) -> dict[str, object]:
    model = {}
    if model_url is not None:  # a model backend: large sessions are sent in chunks
        model = {
            "MEMKILN_BACKEND": "openai",
            "MEMKILN_BASE_URL": model_url,
            "MEMKILN_MODEL": "gpt-4.1-mini",
        }
    env = {
        **os.environ,
        **model,
        "MEMKILN_ARCHIVE": str(archive),
        "MEMKILN_DB": str(work / "memkiln.duckdb"),
        "MEMKILN_OUT": str(work / "memories"),
        "MEMKILN_PREFECT": "true" if prefect else "false",
        "MEMKILN_PROGRESS": "false",
        "PREFECT_HOME": str(work / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    started = time.monotonic()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", MEMKILN, "run", "--backfill"],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=3600,
        check=False,
    )
    seconds = time.monotonic() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    stderr = proc.stderr.split("\tCommand being timed")[0]
    return {
        "exit": proc.returncode,
        "seconds": seconds,
        "peak_gb": int(peak.group(1)) / 1e6 if peak else float("nan"),
        "stdout": proc.stdout,
        "stderr": stderr,
        "traceback": "Traceback" in proc.stdout + stderr,
    }


#: Inputs ``--each`` runs alone, by name.
EACH = (
    "session-100MiB",
    "session-100MiB.zst",
    "session-500MiB",
    "session-1000MiB",
    "sessions-8x30MiB",
    "sessions-8x60MiB",
    "sessions-8x100MiB",
    "zeros-2GiB.zst",
    "repeated-1GiB.gz",
    "line-300MB",
)


def many_sessions(archive: Path, *, count: int, mib: int) -> list[str]:
    """``count`` sessions of about ``mib`` MiB each (each under four windows of kept items,
    so each is read whole): prepared together, a group of them would hold them all at once."""
    sys.path.insert(0, str(REPO / "bench"))
    import synth

    synth.MIN_FILE = synth.MAX_FILE = mib * 1024 * 1024
    ids = []
    for i in range(count):
        rel, body = synth.render_rollout(11, i)
        path = archive / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        ids.append(json.loads(body[: body.index(b"\n")])["payload"]["id"])
    return ids


def large_session(archive: Path, *, mib: int, zst: bool) -> tuple[str, int]:
    """A session of about ``mib`` MiB shaped like real Codex sessions (``bench/synth.py``),
    plain or zstd: ``(its id, its lines)``."""
    sys.path.insert(0, str(REPO / "bench"))
    import synth

    # past 200 MiB, the turns of a 100 MiB session repeated after its header: rendering a
    # 1000 MiB session at once took this process to 10 GB (and the machine's memory killer)
    copies = mib // 100 if mib > 200 else 1
    synth.MIN_FILE = synth.MAX_FILE = (mib // copies) * 1024 * 1024
    rel, body = synth.render_rollout(7, 0)
    path = archive / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    header = body.index(b"\n") + 1
    if zst:
        path = path.with_name(path.name + ".zst")
        path.write_bytes(zstandard.ZstdCompressor(level=3).compress(body))
        copies = 1
    else:
        with path.open("wb") as fh:
            fh.write(body)
            for _ in range(copies - 1):
                fh.write(memoryview(body)[header:])
    first = json.loads(body[:header])
    return first["payload"]["id"], 1 + (body.count(b"\n") - 1) * copies


def write_one(archive: Path, name: str) -> dict[str, object]:
    """An archive holding the input ``name`` beside one good session."""
    start = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    write_rollout(archive, uid(0), session_lines(0, start), start)
    bombs = archive / "bombs"
    bombs.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {"good": uid(0)}
    if name.startswith("sessions-"):
        count, mib = name.removeprefix("sessions-").removesuffix("MiB").split("x")
        many = many_sessions(archive, count=int(count), mib=int(mib))
        out.update({f"many{i}": sid for i, sid in enumerate(many)})
    elif name.startswith("session-"):
        mib = int(name.removeprefix("session-").split("MiB")[0])
        sid, n = large_session(archive, mib=mib, zst=name.endswith(".zst"))
        out.update(large=sid, lines=n)
    elif name == "zeros-2GiB.zst":
        zst = zstandard.ZstdCompressor(level=19).compressobj()
        with open(bombs / "zeros.jsonl.zst", "wb") as fh:
            block = b"\0" * (16 * 1024 * 1024)
            for _ in range(128):
                fh.write(zst.compress(block))
            fh.write(zst.flush())
    elif name == "repeated-1GiB.gz":
        line = json.dumps({"type": "noise", "payload": {"text": "x" * 200}}).encode() + b"\n"
        with gzip.open(bombs / "repeated.jsonl.gz", "wb", compresslevel=9) as gz:
            block = line * ((1024 * 1024) // len(line))
            for _ in range(1024):
                gz.write(block)
    else:
        at = start + timedelta(days=3)
        lines = session_lines(1, at)
        with open(write_rollout(archive, uid(1), lines, at), "ab") as fh:
            fh.write(
                b'{"timestamp":"2026-10-04T09:00:00Z","type":"response_item","payload":'
                b'{"type":"message","role":"user","content":[{"type":"input_text","text":"'
            )
            fh.write(b"y" * 300_000_000)
            fh.write(b'"}]}}\n')
            fh.write((json.dumps(lines[-1]) + "\n").encode())
        out["good2"] = uid(1)
    return out


def stored_of(db: Path, sid: str) -> tuple[int, int, bool]:
    """``(lines the file holds by the store, items stored, its memory is extracted)``."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(
            "select f.lines, (select count(*) from items i where i.rollout_id = $id), "
            "exists (select 1 from stage1_outputs o where o.rollout_id = $id) "
            "from rollouts r join files f using (file_id) where r.rollout_id = $id",
            {"id": sid},
        ).fetchone()
    return row if row else (0, 0, False)  # type: ignore[return-value]


def run_each(names: list[str], *, model_url: str | None = None) -> int:
    print(
        "| input | prefect | exit | lines set aside | traceback | good sessions' memories "
        "| large session: lines stored / in file, memory | time (s) | peak RSS (GB) |"
    )
    print("|---|---|---:|---:|---|---|---|---:|---:|")
    for name in names:
        for prefect in (False, True):
            work = Path(tempfile.mkdtemp(prefix="memkiln-hostile-", dir=os.environ.get("TMPDIR")))
            try:
                kinds = write_one(work / "archive", name)
                result = run_memkiln(work / "archive", work, prefect=prefect, model_url=model_url)
                text = str(result["stdout"]) + str(result["stderr"])
                set_aside = [ln for ln in text.splitlines() if ln.startswith("set aside: ")]
                good = [k for k in kinds if k in ("good", "good2") or k.startswith("many")]
                made = sum(stored_of(work / "memkiln.duckdb", str(kinds[k]))[2] for k in good)
                large = "—"
                if "large" in kinds:
                    _, items, memory = stored_of(work / "memkiln.duckdb", str(kinds["large"]))
                    large = f"{items:,} / {kinds['lines']:,}, {'yes' if memory else 'NO'}"
                print(
                    f"| {name} | {'on' if prefect else 'off'} | {result['exit']} "
                    f"| {len(set_aside)} | {'YES' if result['traceback'] else 'no'} "
                    f"| {made} of {len(good)} | {large} | {result['seconds']:.0f} "
                    f"| {result['peak_gb']:.2f} |",
                    flush=True,
                )
                for ln in set_aside:
                    print(f"    {ln}", flush=True)
                if result["traceback"] or result["exit"] not in (0, 1):
                    print(text[-3000:], flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return 0


def memories_of(out: Path) -> list[str]:
    return sorted(p.parent.name for p in out.glob("*/raw_memories.md"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="small bombs and lines")
    parser.add_argument("--prefect", action="store_true", help="run as a Prefect flow")
    parser.add_argument("--write-only", type=Path, help="write the archive here and stop")
    parser.add_argument(
        "--each", nargs="*", choices=EACH, help="run these inputs alone (all when none named)"
    )
    parser.add_argument(
        "--model",
        action="store_true",
        help="with --each: extract with the openai backend against the local test server",
    )
    args = parser.parse_args()
    if args.each is not None and args.model:
        from extract import start_server  # bench/extract.py

        server, url = start_server(latency=0.05)
        try:
            return run_each(args.each or list(EACH), model_url=url)
        finally:
            server.terminate()
            server.wait(timeout=30)
    if args.each is not None:
        return run_each(args.each or list(EACH))
    if args.write_only:
        kinds = write_archive(args.write_only, small=args.small)
        print(json.dumps(kinds, indent=2))
        return 0
    work = Path(tempfile.mkdtemp(prefix="memkiln-hostile-"))
    try:
        kinds = write_archive(work / "archive", small=args.small)
        result = run_memkiln(work / "archive", work, prefect=args.prefect)
        out_lines = [ln for ln in (result["stdout"] + result["stderr"]).splitlines() if ln]  # type: ignore[operator]
        print("\n".join(out_lines))
        print()
        set_aside = [ln for ln in out_lines if ln.startswith("set aside: ")]
        summaries = list((work / "memories").glob("*/rollout_summaries/*.md"))
        print(
            "| archive | prefect | exit | lines set aside | traceback | projects with memories "
            "| session summaries | time (s) | peak RSS (GB) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        print(
            f"| {'small' if args.small else 'full'} | {args.prefect} | {result['exit']} "
            f"| {len(set_aside)} | {result['traceback']} "
            f"| {len(memories_of(work / 'memories'))} | {len(summaries)} "
            f"| {result['seconds']:.0f} | {result['peak_gb']:.2f} |"
        )
        print(
            f"bad inputs: {len(kinds['bad'])}; sessions that should give a memory: "
            f"{len(kinds['good'])}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
