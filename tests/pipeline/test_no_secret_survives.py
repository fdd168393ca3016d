"""No secret survives, end to end: a rollout full of secrets goes through ingest, the store,
render-input and extraction; every text written anywhere is scanned for them."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from memkiln.io.rules import load_rules
from memkiln.llm.requests import stage_one_input_for_file
from memkiln.pipeline.extract import extract_store
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from tests.transforms.test_redact import (
    FIXTURE_SECRETS,
    ORDINARY,
    _json_key_value,
    _tool_call_arguments,
    _tool_output,
    _user_message,
)

PLACEMENTS = {
    "user text": _user_message,
    "tool output": _tool_output,
    "tool-call arguments": _tool_call_arguments,
    "json-escaped key/value": _json_key_value,
}


def store_texts(db: Path) -> list[tuple[str, str]]:
    """Every text value of every table: ``(table.column, value)``."""
    out: list[tuple[str, str]] = []
    with duckdb.connect(str(db), read_only=True) as con:
        columns = con.execute(
            "select table_name, column_name, data_type from information_schema.columns "
            "where table_schema = 'main' and table_name in (select table_name from "
            "information_schema.tables where table_type = 'BASE TABLE')"
        ).fetchall()
        for table, column, dtype in columns:
            if "VARCHAR" not in dtype and "STRUCT" not in dtype:
                continue
            query = f'select "{column}"::varchar from "{table}"'
            if dtype.startswith("STRUCT") and dtype.endswith("[]"):  # message parts
                query = f'select p.text from (select unnest("{column}") as p from "{table}")'
            rows = con.execute(query).fetchall()
            out += [(f"{table}.{column}", v) for (v,) in rows if v]
    return out


def test_forty_plus_secrets_leave_no_trace_in_the_store_or_the_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len({fx.secret for fx in FIXTURE_SECRETS}) >= 40
    meta = {"timestamp": "2026-01-02T03:04:05.000Z", "type": "session_meta",
            "payload": {"id": "019b2222-0000-7000-8000-000000000001", "cwd": "/srv/app", "source": "cli"}}  # fmt: skip
    ordinary = "\n".join(ORDINARY)
    lines = [json.dumps(meta), _user_message_text(ordinary)]
    for fx in FIXTURE_SECRETS:
        lines += [make(fx) for make in PLACEMENTS.values()]
    archive = tmp_path / "archive" / "sessions" / "2026" / "01" / "02"
    archive.mkdir(parents=True)
    rollout = archive / "rollout-2026-01-02T03-04-05-019b2222-0000-7000-8000-000000000001.jsonl"
    rollout.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = Settings(archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
                 min_rollout_idle_hours=0)  # fmt: skip

    summary = ingest_archive(s)
    extract_store(s)  # the heuristic writes memories from these very items
    prompt, _ = stage_one_input_for_file(rollout, context_window=None, rules=load_rules())

    assert summary.quarantined == 0 and sum(summary.hits.values()) > 0
    texts = [*store_texts(s.db), ("render-input", prompt.user)]
    # the ordinary strings legitimately mention key headers and webhook hosts: take them out
    # of what is scanned (their survival is checked on its own below)
    forms = {o for o in ORDINARY} | {json.dumps(o, ensure_ascii=False)[1:-1] for o in ORDINARY}
    for form in sorted(forms, key=len, reverse=True):
        texts = [(where, text.replace(form, "")) for where, text in texts]
    found: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    leaks = []
    for fx in FIXTURE_SECRETS:
        total[fx.format] += 1
        hits = sorted({(where, n) for where, text in texts for n in fx.needles if n in text})
        if hits:
            leaks.append(f"{fx.name}: {hits[0][1]!r} in {sorted({w for w, _ in hits})}")
        else:
            found[fx.format] += 1
    with capsys.disabled():
        print("\nper-format recall (ingest -> DuckDB -> render-input -> stage-one output):")
        for fmt in sorted(total):
            print(f"  {fmt:<28} {found[fmt]:>3}/{total[fmt]:<3} {found[fmt] / total[fmt]:.0%}")
    assert not leaks, "\n".join(leaks)
    # ordinary text came through untouched, in the store and in the prompt
    with duckdb.connect(str(s.db), read_only=True) as con:
        stored = con.execute(
            "select text from items where text like '%' || $t || '%'", {"t": ORDINARY[0]}
        ).fetchall()
    assert stored and all(o in stored[0][0] for o in ORDINARY)
    body = prompt.user.split("<rollout_contents>\n", 1)[1].split("\n</rollout_contents>", 1)[0]
    first = json.loads(body.splitlines()[0])
    assert first["content"][0]["text"] == ordinary


def _user_message_text(text: str) -> str:
    return json.dumps({"timestamp": "2026-01-02T03:04:05.500Z", "type": "response_item",
                       "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})  # fmt: skip
