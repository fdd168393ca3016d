"""A token cut by two consecutive tool outputs of a session is redacted on both sides when the
two outputs fall in two parts of a batch parsed apart, or in two pieces of a large file
written apart (issue 29, point 4)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from memkiln.io import large_file, loader
from memkiln.io.rules import load_rules
from memkiln.pipeline.ingest import ingest_archive
from memkiln.settings import Settings
from memkiln.transforms.lines import split_lines
from memkiln.transforms.redact_across import HIT_ID, redact_across_parts
from tests.pipeline.test_no_secret_survives import store_texts

AT = "2026-01-02T03:04:05.000Z"
SESSION = "019b3333-0000-7000-8000-000000000009"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
HALVES = [TOKEN[:20], TOKEN[20:], TOKEN[4:20], TOKEN[20:36]]
RULES = load_rules()


def session_bytes(filler: int = 0, *, failed: bool = False) -> bytes:
    """A session whose two tool outputs end and start with the halves of ``TOKEN``, each
    output's line after ``filler`` bytes of an answer (so the two fall in two parts); with
    ``failed``, the first output is a failed command's whose error line ends in the half."""
    meta = {"timestamp": AT, "type": "session_meta",
            "payload": {"id": SESSION, "cwd": "/srv/app", "source": "cli"}}  # fmt: skip
    lines = [json.dumps(meta)]
    first = f"Exit code: 1\nerror: bad credentials {TOKEN[:20]}"
    outputs = [first if failed else f"$ head -c 20 token.txt\n{TOKEN[:20]}",
               f"{TOKEN[20:]}\n$ echo done"]  # fmt: skip
    for n, output in enumerate(outputs):
        call = {"type": "function_call", "name": "shell", "call_id": f"call_{n}",
                "arguments": json.dumps({"command": ["bash", "-lc", "cat token.txt"]})}  # fmt: skip
        answer = {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "reading " * (filler // 8)}]}  # fmt: skip
        result = {"type": "function_call_output", "call_id": f"call_{n}", "output": output}
        lines += [json.dumps({"timestamp": AT, "type": "response_item", "payload": p})
                  for p in (answer, call, result)]  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def leaks(texts: list[tuple[str, str]]) -> list[str]:
    return sorted({f"{h} in {where}" for h in HALVES for where, text in texts if h in text})


def test_a_token_cut_by_two_tool_outputs_parsed_in_two_parts_leaves_neither_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = session_bytes(filler=4000)
    monkeypatch.setattr(loader, "PARSE_PART_BYTES", 3000)  # a part a line, about
    lines = split_lines([(1, body)])
    files = pl.DataFrame({"fid": [1], "path": ["/a/rollout.jsonl"]})
    with duckdb.connect() as con:
        norm = loader.normalize_lines(con, lines, files=files, rules=RULES)
    outputs = norm.items.filter(pl.col("item_type") == "function_call_output")["text"]
    assert outputs.len() == 2
    assert "echo done" in outputs[1]
    assert leaks([("items.text", t) for t in outputs.to_list()]) == []
    assert norm.hits.get(HIT_ID) == 1


@pytest.mark.parametrize("failed", [False, True], ids=["output", "error_line"])
def test_a_token_cut_by_two_tool_outputs_in_two_pieces_of_a_large_file_leaves_neither_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failed: bool
) -> None:
    # failed: the half also in the first call's error line (tool_calls.error_line), written
    # with the piece before the one that shows it is half of a token
    monkeypatch.setattr(loader, "WHOLE_FILE_BYTES", 1)  # every file is read in pieces …
    monkeypatch.setattr(large_file, "FILE_PIECE_BYTES", 300)  # … of about a line each
    folder = tmp_path / "archive" / "sessions" / "2026" / "01" / "02"
    folder.mkdir(parents=True)
    body = session_bytes(failed=failed)
    (folder / f"rollout-2026-01-02T03-04-05-{SESSION}.jsonl").write_bytes(body)
    s = Settings(archive=tmp_path / "archive", db=tmp_path / "m.duckdb", backfill=True,
                 min_rollout_idle_hours=0)  # fmt: skip

    summary = ingest_archive(s)

    assert summary.quarantined == 0
    texts = store_texts(s.db)
    assert any("echo done" in text for _, text in texts)
    assert leaks(texts) == []
    with duckdb.connect(str(s.db), read_only=True) as con:
        hits = con.execute(
            "select sum(hits) from redaction_hits where rule_id = $r", {"r": HIT_ID}
        ).fetchall()
    assert hits == [(1,)]
    if failed:
        with duckdb.connect(str(s.db), read_only=True) as con:
            lines = con.execute("select error_line from tool_calls order by seq").fetchall()
        assert lines[0][0] is not None and lines[0][0].startswith("error: bad credentials")


def test_only_joins_between_two_parts_are_looked_at() -> None:
    # three outputs of one file: the first two in one part (their join is that part's own
    # redaction's to see), the third in the next part
    items = pl.DataFrame(
        {
            "fid": [1, 1, 1, 2],
            "line_no": [1, 2, 3, 1],
            "part": [0, 0, 1, 1],
            "item_type": ["function_call_output"] * 4,
            "text": [
                f"x\n{TOKEN[:20]}",
                f"{TOKEN[20:]}\ny\n{TOKEN[:20]}",
                f"{TOKEN[20:]}\nz",
                f"{TOKEN[20:]}\nw",  # another file: not joined to file 1's
            ],
        }
    )
    out, hits = redact_across_parts(items, rules=RULES, part="part")
    texts = out["text"].to_list()
    assert texts[0] == items["text"][0]  # inside part 0: left to that part
    assert texts[1].startswith(TOKEN[20:]) and TOKEN[:20] not in texts[1]
    assert TOKEN[20:] not in texts[2]
    assert texts[3] == items["text"][3]
    assert hits == {HIT_ID: 1}
