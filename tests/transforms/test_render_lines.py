"""The rollout contents a model reads, pinned line by line (a changed line of the renderer
must fail a test, ``bench/mutation.py``): one compact JSON object per kept item, in Codex's
field names, in session order, one rollout per row, redacted again with the current rules."""

from __future__ import annotations

import polars as pl

from memkiln.io.rules import load_rules
from memkiln.transforms.render import contents_by_rollout

SCHEMA = {
    "rollout_id": pl.String,
    "seq": pl.Int64,
    "item_type": pl.String,
    "role": pl.String,
    "name": pl.String,
    "call_id": pl.String,
    "text": pl.String,
    "parts": pl.List(pl.Struct({"type": pl.String, "text": pl.String})),
}
TOKEN = "ghp_" + "a1B2" * 9


def row(rid: str, seq: int, item_type: str, text: str, **kw: object) -> dict[str, object]:
    base = {"rollout_id": rid, "seq": seq, "item_type": item_type, "role": None, "name": None,
            "call_id": None, "text": text, "parts": None}  # fmt: skip
    return base | kw


def contents(rows: list[dict[str, object]]) -> dict[str, str]:
    out = contents_by_rollout(pl.DataFrame(rows, schema=SCHEMA).lazy(), rules=load_rules())
    return dict(out.collect().select("rollout_id", "contents").iter_rows())


def test_each_item_type_renders_with_codexs_field_names_in_session_order() -> None:
    rows = [
        row("r1", 2, "function_call", '{"cmd":"ls"}', name="shell", call_id="c1"),
        row("r1", 1, "message", "hi", role="user", parts=[{"type": "input_text", "text": "hi"}]),
        row("r1", 3, "function_call_output", f"ok {TOKEN}", call_id="c1"),
        row("r1", 4, "custom_tool_call", "*** Begin", name="apply_patch", call_id="c2"),
        row("r1", 5, "custom_tool_call_output", "done", call_id="c2"),
        row("r1", 6, "tool_search_output", "found", call_id="c3"),
        row("r1", 7, "local_shell_call", "ls -la", call_id="c4"),
        row("r2", 1, "web_search_call", "q"),
    ]
    assert contents(rows) == {
        "r1": "\n".join(
            [
                '{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}',
                '{"type":"function_call","name":"shell","call_id":"c1","arguments":"{\\"cmd\\":\\"ls\\"}"}',
                '{"type":"function_call_output","call_id":"c1","output":"ok [REDACTED_SECRET]"}',
                '{"type":"custom_tool_call","name":"apply_patch","call_id":"c2","input":"*** Begin"}',
                '{"type":"custom_tool_call_output","call_id":"c2","output":"done"}',
                '{"type":"tool_search_output","call_id":"c3","output":"found"}',
                '{"type":"local_shell_call","call_id":"c4","action":"ls -la"}',
            ]
        ),
        "r2": '{"type":"web_search_call","call_id":null,"action":"q"}',
    }


def test_a_secret_in_any_field_is_redacted_in_the_rendered_line() -> None:
    rows = [
        row("r", 1, "function_call", "{}", name=f"run {TOKEN}", call_id=TOKEN),
        row("r", 2, "message", TOKEN, role="user", parts=[{"type": "input_text", "text": TOKEN}]),
    ]
    rendered = contents(rows)["r"]
    assert TOKEN not in rendered
    assert rendered.count("[REDACTED_SECRET]") == 3
