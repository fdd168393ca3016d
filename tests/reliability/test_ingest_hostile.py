"""Ingest under hostile input: what an attack on memkiln found, kept found.

Each test here failed before its fix: a forked session named by its parent, secrets spelled
with JSON escapes or sitting in paths stored in clear, a symbolic link read outside the
archive, a line without a required field failing the whole run.
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

import duckdb
import polars as pl

from memkiln.io.loader import parse_lines
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.normalize import build_items, build_rollouts
from tests.pipeline.test_no_secret_survives import store_texts

OWN = "019c0000-aaaa-7bbb-8ccc-000000000002"
PARENT = "019c0000-aaaa-7bbb-8ccc-000000000001"
#: Canaries: format-valid, made up here.
GITHUB = "ghp_" + "Q7w2E9r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
AWS = "AKIA" + "Z7Q3K5X2M4N6P8R1"


def meta(uid: str, at: str, **extra: object) -> dict[str, object]:
    return {"timestamp": at, "type": "session_meta",
            "payload": {"id": uid, "timestamp": at, "cwd": "/home/dev/app", **extra}}  # fmt: skip


def user(text: str, at: str = "2026-03-01T10:00:05.000Z") -> dict[str, object]:
    return {"timestamp": at, "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}  # fmt: skip


def write(path: Path, lines: list[object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    out = [ln if isinstance(ln, str) else json.dumps(ln) for ln in lines]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def ingest(archive: Path, db: Path):  # type: ignore[no-untyped-def]
    return ingest_archive(Settings(archive=archive, db=db))


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


# -- 1. session identity --------------------------------------------------------------------

FORKED = [
    meta(OWN, "2026-03-02T10:00:00.000Z", forked_from_id=None),
    # the parent's session_meta, copied in when the session was forked (written then)
    {
        **meta(PARENT, "2026-03-02T10:00:00.001Z"),
        "payload": {
            "id": PARENT,
            "timestamp": "2026-03-01T09:00:00.000Z",
            "cwd": "/home/dev/parent",
        },
    },
    user("continue the refactor", "2026-03-02T10:00:05.000Z"),
]


def test_a_forked_file_is_named_by_its_first_session_meta_whatever_the_row_order() -> None:
    """The first session_meta by line number names the session; the row order the parser
    hands back (not stable across runs) must not matter."""
    good = pl.DataFrame(
        {"fid": [1] * 3, "line_no": [1, 2, 3], "line": [json.dumps(x) for x in FORKED],
         "omitted_bytes": [0] * 3},
        schema={"fid": pl.Int64, "line_no": pl.Int32, "line": pl.String, "omitted_bytes": pl.Int32},
    )  # fmt: skip
    with duckdb.connect(":memory:") as con:
        fields, blocks, formats = parse_lines(con, good)
    files = formats.with_columns(
        path=pl.lit("/a/x.jsonl"), n_lines=pl.lit(3, pl.Int64), n_quarantined=pl.lit(0, pl.Int64)
    )
    for order in (fields, fields.reverse(), fields.sort("line_no", descending=True)):
        items = build_items(order.lazy(), blocks.lazy()).collect()
        (row,) = build_rollouts(order.lazy(), items.lazy(), files.lazy()).collect().to_dicts()
        assert row["rollout_id"] == OWN
        assert row["forked_from_id"] == PARENT  # the later session_meta is its lineage
        assert row["cwd"] == "/home/dev/app"
        assert str(row["started_at"]).startswith("2026-03-02 10:00:00")


def test_a_resumed_file_keeps_its_own_identity_in_every_fresh_ingest(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    write(archive / "sessions" / f"rollout-2026-03-02T10-00-00-{OWN}.jsonl", FORKED)
    seen = set()
    for i in range(3):
        db = tmp_path / f"m{i}.duckdb"
        ingest(archive, db)
        seen |= set(query(db, "select rollout_id, forked_from_id, started_at from rollouts"))
        os.utime(next(archive.rglob("*.jsonl")))
    assert {(r[0], r[1]) for r in seen} == {(OWN, PARENT)}


# -- 2. JSON escapes ------------------------------------------------------------------------


def escaped(text: str, depth: int) -> str:
    """``text`` with its first character as a JSON ``\\u`` escape, ``depth`` strings deep."""
    return "\\" * (2 ** (depth - 1)) + f"u{ord(text[0]):04x}" + text[1:]


def decoded_forms(value: str) -> list[str]:
    """A stored text, and what it reads as once (twice) more decoded as a JSON string body."""
    forms = [value]
    for _ in range(2):
        try:
            forms.append(codecs.decode(forms[-1], "unicode_escape"))
        except (UnicodeDecodeError, ValueError):
            break
    return forms


def test_secrets_spelled_with_json_escapes_are_redacted_in_every_stored_form(
    tmp_path: Path,
) -> None:
    uid = "019c0000-aaaa-7bbb-8ccc-000000000003"
    call_args = json.dumps({"command": ["bash", "-lc", f"export AWS_KEY={AWS} GH={GITHUB}"]})
    lines = [
        json.dumps(meta(uid, "2026-03-01T10:00:00.000Z")),
        # raw JSON written by hand: the secrets are escaped in the file
        '{"timestamp":"2026-03-01T10:00:01.000Z","type":"response_item","payload":{"type":"message",'
        '"role":"user","content":[{"type":"input_text","text":"keys: '
        + escaped(AWS, 1) + " and " + escaped(GITHUB, 1) + '"}]}}',
        '{"timestamp":"2026-03-01T10:00:02.000Z","type":"response_item","payload":{"type":'
        '"function_call","name":"shell","call_id":"c1","arguments":'
        + json.dumps(call_args).replace("AKIA", escaped("AKIA", 2)).replace("ghp_", escaped("ghp_", 2))
        + "}}",
        '{"timestamp":"2026-03-01T10:00:03.000Z","type":"response_item","payload":{"type":'
        '"function_call_output","call_id":"c1","output":"' + "\\u0041\\u004b\\u0049\\u0041" + AWS[4:] + '"}}',
    ]  # fmt: skip
    archive = tmp_path / "archive"
    write(archive / "sessions" / f"rollout-2026-03-01T10-00-00-{uid}.jsonl", lines)
    db = tmp_path / "m.duckdb"

    summary = ingest(archive, db)

    assert summary.quarantined == 0 and summary.items == 4
    leaks = [
        (where, value[:80])
        for where, value in store_texts(db)
        for form in decoded_forms(value)
        if AWS in form or GITHUB in form
    ]
    assert not leaks
    texts = [t for (t,) in query(db, "select text from items order by seq") if t]
    assert sum(t.count("[REDACTED_SECRET]") for t in texts) >= 5
    # what is not a secret keeps its meaning
    assert query(db, "select count(*) from items where text like 'keys: % and %'") == [(1,)]


# -- 4. secrets in paths, cwd and git remote ------------------------------------------------


def test_secrets_in_archive_paths_cwd_and_remote_are_not_stored(tmp_path: Path) -> None:
    uid = "019c0000-aaaa-7bbb-8ccc-000000000004"
    archive = tmp_path / "archive"
    folder = archive / f"token={GITHUB}" / "sessions"
    remote = f"https://ci:{GITHUB}@github.com/acme/shop.git"
    path = write(
        folder / f"rollout-2026-03-01T10-00-00-{uid}.jsonl",
        [
            meta(
                uid,
                "2026-03-01T10:00:00.000Z",
                cwd=f"/home/dev/{AWS}/shop",
                git={"repository_url": remote, "branch": f"fix/{GITHUB}"},
            ),
            user("hello"),
            "{not json",
        ],
    )
    db = tmp_path / "m.duckdb"

    first = ingest(archive, db)
    second = ingest(archive, db)

    assert first.rollouts == 1 and first.quarantined == 1
    assert second.files_skipped == 1 and second.files_new == 0  # still recognised
    leaks = [(w, v) for w, v in store_texts(db) if AWS in v or GITHUB in v]
    assert not leaks
    (stored,) = query(db, "select path, cwd, project_key from rollouts")
    assert stored[0].endswith(path.name) and "[REDACTED_SECRET]" in stored[0]
    assert query(db, "select count(*) from quarantine where path like '%[REDACTED_SECRET]%'") == [
        (1,)
    ]
    # the file is re-read when it changes, and stays one file
    with path.open("a") as fh:
        fh.write(json.dumps(user("more")) + "\n")
    third = ingest(archive, db)
    assert third.files_changed == 1
    assert query(db, "select count(*) from files") == [(1,)]


def test_a_secret_in_any_field_a_line_gives_the_store_is_redacted(tmp_path: Path) -> None:
    """Lines are parsed before they are redacted; what the store takes from them is redacted
    once built. A secret where no session puts one (the session id, a record or item type, a
    tool's name or call id, a Claude Code session and agent id, a line that goes to
    quarantine) is still not stored."""
    codex = [
        meta(GITHUB, "2026-03-01T10:00:00.000Z"),
        {"timestamp": "2026-03-01T10:00:01.000Z", "type": f"event {AWS}", "payload": {}},
        {"timestamp": "2026-03-01T10:00:02.000Z", "type": "response_item",
         "payload": {"type": f"tool {AWS}", "name": GITHUB, "call_id": AWS}},
        {"timestamp": "2026-03-01T10:00:03.000Z", "type": "response_item",
         "payload": {"type": "function_call", "name": f"run {GITHUB}", "call_id": f"c {AWS}",
                     "arguments": "{}"}},
        user("hello"),
        [f"not an object {GITHUB}"],
        '{"timestamp": "2026-03-01T10:00:06.000Z", "cut": "' + AWS,
    ]  # fmt: skip
    claude = [
        {"sessionId": GITHUB, "agentId": AWS, "type": "user", "cwd": "/home/dev/app",
         "timestamp": "2026-03-01T10:00:00.000Z", "gitBranch": f"fix/{GITHUB}",
         "message": {"role": "user", "content": "hello"}},
    ]  # fmt: skip
    archive = tmp_path / "archive"
    write(archive / "sessions" / "rollout-2026-03-01T10-00-00-x.jsonl", codex)
    write(archive / "claude" / "project" / "5f0c0000-0000-4000-8000-000000000009.jsonl", claude)
    db = tmp_path / "m.duckdb"

    summary = ingest(archive, db)

    assert summary.rollouts == 2 and summary.quarantined == 2
    texts = store_texts(db)
    assert [(where, value[:80]) for where, value in texts if AWS in value or GITHUB in value] == []
    redacted = {where for where, value in texts if "[REDACTED_SECRET]" in value}
    assert {
        "rollouts.rollout_id",
        "rollouts.parent_id",
        "rollouts.git_branch",
        "items.record_type",
        "items.item_type",
        "items.name",
        "items.call_id",
        "quarantine.excerpt",
    } <= redacted


# -- 8. symbolic links ----------------------------------------------------------------------


def test_a_symbolic_link_in_the_archive_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    secret_file = write(
        outside / "private.jsonl", [meta(OWN, "2026-03-01T10:00:00.000Z"), "root:x:0:0:outside"]
    )
    archive = tmp_path / "archive"
    (archive / "sessions").mkdir(parents=True)
    (archive / "sessions" / "x.jsonl").symlink_to(secret_file)
    (archive / "linked-dir").symlink_to(outside, target_is_directory=True)
    (archive / "passwd.jsonl").symlink_to("/etc/passwd")
    db = tmp_path / "m.duckdb"

    summary = ingest(archive, db)

    assert summary.files_seen == 0 and summary.bytes_read == 0
    assert query(db, "select count(*) from quarantine") == [(0,)]
    assert query(db, "select count(*) from rollouts") == [(0,)]


# -- 11. a JSON object without a required field ---------------------------------------------


def test_a_line_without_a_type_is_stored_and_the_run_completes(tmp_path: Path) -> None:
    uid = "019c0000-aaaa-7bbb-8ccc-000000000005"
    archive = tmp_path / "archive"
    write(
        archive / f"rollout-2026-03-01T10-00-00-{uid}.jsonl",
        [
            meta(uid, "2026-03-01T10:00:00.000Z"),
            {"payload": {"content": [{"type": None}]}},  # an envelope without its type
            {"timestamp": 5, "type": None, "payload": {"type": {"not": "a string"}}},
            user("still here"),
        ],
    )
    db = tmp_path / "m.duckdb"

    summary = ingest(archive, db)

    assert summary.rollouts == 1 and summary.items == 4 and summary.quarantined == 0
    assert query(db, "select line_no, record_type from items order by line_no")[1:3] == [
        (2, "unknown"),
        (3, "unknown"),
    ]


# -- quarantine excerpts --------------------------------------------------------------------


def test_an_invalid_utf8_line_holding_a_secret_has_a_redacted_excerpt(tmp_path: Path) -> None:
    uid = "019c0000-aaaa-7bbb-8ccc-000000000006"
    archive = tmp_path / "archive"
    path = write(archive / f"rollout-2026-03-01T10-00-00-{uid}.jsonl",
                 [meta(uid, "2026-03-01T10:00:00.000Z"), user("fine")])  # fmt: skip
    with path.open("ab") as fh:
        fh.write(b'{"bad":"\xff\xfe", "key":"' + AWS.encode() + b'", "t":"' + GITHUB.encode()
                 + b'", "u":"\\u0041' + AWS[1:].encode() + b'"}\n')  # fmt: skip
        fh.write(b"export GH=" + GITHUB[:10].encode() + b"\xff" + GITHUB[10:].encode() + b"\n")
    db = tmp_path / "m.duckdb"

    summary = ingest(archive, db)

    assert summary.quarantined == 2
    excerpts = [e for (e,) in query(db, "select excerpt from quarantine order by line_no")]
    assert all("[REDACTED_SECRET]" in e for e in excerpts), excerpts
    for e in excerpts:
        assert AWS not in e and GITHUB not in e and AWS[4:] not in e and GITHUB[10:] not in e
