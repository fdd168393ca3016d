"""Normalize the three rollout formats into one item schema and one rollout row per file.

Input frames come from the field-extraction queries in ``sql/queries`` (every needed JSON
path of a line pulled out as text in one parse):

- ``fields``: one row per JSON-object line, columns named as in ``extract_line_fields.sql``;
- ``blocks``: one row per element of a message content array, as in
  ``extract_content_blocks.sql``.

Branching is on the fields present, not on version numbers: the legacy Codex layout (a bare
header line, ``record_type`` markers, items without the ``{timestamp, type, payload}``
envelope) and the current one are told apart line by line.

The item schema (see ``sql/schema/0004_items.sql``): ``record_type`` is ``response_item`` for
anything that is conversation (whatever the format), else the format's own line type;
``item_type`` follows Codex's names (``message``, ``function_call``, ``function_call_output``,
``reasoning``, ``custom_tool_call``, ``local_shell_call``, ``web_search_call``, ``image``, …).
"""

from __future__ import annotations

import polars as pl

from memkiln.transforms.project import project_key
from memkiln.transforms.provenance import provenance_expr
from memkiln.transforms.redact import RuleSet, redact_expr, redact_frame_counted

CODEX_RECORD_TYPES = (
    "session_meta",
    "response_item",
    "turn_context",
    "event_msg",
    "compacted",
    "inter_agent_communication",
    "world_state",
)
CODEX_ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
    "reasoning",
)
CLAUDE_LINE_TYPES = (
    "user",
    "assistant",
    "summary",
    "system",
    "progress",
    "file-history-snapshot",
    "queue-operation",
    "attachment",
    "last-prompt",
    "ai-title",
)

#: Claude Code / Pi content block type -> item type.
BLOCK_ITEM_TYPES = {
    "text": "message",
    "thinking": "reasoning",
    "redacted_thinking": "reasoning",
    "tool_use": "function_call",
    "toolCall": "function_call",
    "tool_result": "function_call_output",
    "image": "image",
}

ITEM_COLUMNS = pl.Schema(
    {
        "fid": pl.Int64(),
        "line_no": pl.Int32(),
        "part_idx": pl.Int32(),
        "ts": pl.Datetime("us", "UTC"),
        "record_type": pl.String(),
        "item_type": pl.String(),
        "role": pl.String(),
        "name": pl.String(),
        "call_id": pl.String(),
        "text": pl.String(),
        "parts": pl.List(pl.Struct({"type": pl.String(), "text": pl.String()})),
        "payload_json": pl.String(),
        "omitted_bytes": pl.Int32(),
        "provenance": pl.String(),
    }
)


def parse_timestamp(expr: pl.Expr) -> pl.Expr:
    """ISO-8601 text (``…Z`` or ``…+hh:mm``) to a UTC timestamp; anything else is null."""
    return pl.coalesce(
        expr.str.to_datetime(
            format="%Y-%m-%dT%H:%M:%S%.fZ", strict=False, time_zone="UTC", time_unit="us"
        ),
        expr.str.to_datetime(
            format="%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_zone="UTC", time_unit="us"
        ),
    )


def legacy_codex_header() -> pl.Expr:
    """The bare first line of a mid-2025 Codex rollout: ``{id, timestamp, instructions, git}``
    with no ``type`` and no envelope (``instructions`` and ``git`` may be null)."""
    return (
        ~pl.col("has_payload")
        & pl.col("type").is_null()
        & pl.col("record_type").is_null()
        & pl.col("id").is_not_null()
        & pl.col("timestamp").is_not_null()
        & pl.col("session_id").is_null()
        & pl.col("m_role").is_null()
    )


def detect_formats(fields: pl.LazyFrame) -> pl.LazyFrame:
    """One row per file: ``fid`` and ``format`` (codex | claude | pi | null), from content.

    Each line votes for the formats whose markers it carries; the file takes the majority.
    """
    return formats_from_votes(format_votes(fields))


def format_votes(fields: pl.LazyFrame) -> pl.LazyFrame:
    """``fid, codex, claude, pi``: how many lines of each file carry each format's markers
    (votes of several parts of a file add up)."""
    t = pl.col("type")
    codex = (
        (pl.col("has_payload") & t.is_in(CODEX_RECORD_TYPES))
        | pl.col("record_type").is_not_null()
        | legacy_codex_header()
        | (
            t.is_in(CODEX_ITEM_TYPES)
            & pl.col("session_id").is_null()
            & pl.col("m_role").is_null()
            & ~pl.col("has_payload")
        )
    )
    claude = pl.col("session_id").is_not_null() | (
        t.is_in(CLAUDE_LINE_TYPES) & pl.col("m_role").is_not_null()
    )
    pi = ~pl.col("has_payload") & (
        ((t == "session") & pl.col("cwd").is_not_null())
        | ((t == "message") & pl.col("m_role").is_not_null() & pl.col("session_id").is_null())
    )
    return fields.group_by("fid").agg(
        codex=codex.sum().cast(pl.Int64),
        claude=claude.sum().cast(pl.Int64),
        pi=pi.sum().cast(pl.Int64),
    )


def formats_from_votes(votes: pl.LazyFrame) -> pl.LazyFrame:
    """``fid, format``: the majority of each file's votes (summed first when a file's lines
    were counted in several parts); no vote at all gives null."""
    votes = votes.group_by("fid").agg(pl.col("codex", "claude", "pi").sum())
    best = pl.max_horizontal("codex", "claude", "pi")
    return votes.select(
        "fid",
        format=pl.when(best == 0)
        .then(None)
        .when(pl.col("codex") == best)
        .then(pl.lit("codex"))
        .when(pl.col("claude") == best)
        .then(pl.lit("claude"))
        .otherwise(pl.lit("pi")),
    )


def content_arrays(fields: pl.LazyFrame) -> pl.LazyFrame:
    """The message content arrays to explode into blocks: ``fid, line_no, content``."""
    content = (
        pl.when(pl.col("format") == "codex")
        .then(
            pl.when(pl.col("has_payload"))
            .then(pl.when(pl.col("p_content0").is_not_null()).then(pl.col("p_content")))
            .otherwise(pl.when(pl.col("content0").is_not_null()).then(pl.col("content")))
        )
        .otherwise(pl.when(pl.col("m_content0").is_not_null()).then(pl.col("m_content")))
    )
    return fields.select("fid", "line_no", content=content).filter(pl.col("content").is_not_null())


#: Codex item type -> the payload field whose value becomes the item's ``text``.
CODEX_TEXT_FIELDS = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "function_call_output": "output",
    "custom_tool_call_output": "output",
    "reasoning": "summary",
    "local_shell_call": "action",
    "web_search_call": "action",
}


def payload_text_paths(fields: pl.LazyFrame) -> pl.LazyFrame:
    """``fid, line_no, text_path, text_path2``: the JSON paths of a line whose values the
    line's item already holds (``text``, or ``parts`` for a message), so ``payload_json``
    stores them once (the item keeps the line without them). Null where the items' payloads are
    content blocks (Claude Code / Pi messages with a content array: see
    ``extract_content_blocks.sql``) or nothing is held twice.

    Follows :func:`codex_items` and :func:`message_items` case for case: a field is removed
    only when that very field is the item's text.
    """
    env = pl.col("has_payload")
    prefix = pl.when(env).then(pl.lit("$.payload.")).otherwise(pl.lit("$."))
    item_type = (
        pl.when(env)
        .then(pl.col("p_type"))
        .when(pl.col("record_type").is_null())
        .then(pl.col("type"))
    )
    content_array = pl.when(env).then(pl.col("p_content0")).otherwise(pl.col("content0"))
    codex_field = (
        pl.when((item_type == "message") & content_array.is_not_null())
        .then(pl.lit("content"))
        .when(item_type == "message")
        .then(None)
        .otherwise(item_type.replace_strict(CODEX_TEXT_FIELDS, default=None))
    )
    codex = (
        pl.when(codex_field.is_not_null())
        .then(pl.concat_str([prefix, codex_field]))
        .when(env & pl.col("type").is_in(["event_msg", "compacted"]))
        .then(pl.lit("$.payload.message"))
    )
    role = pl.col("m_role")
    # a shell run's text is command and output joined (null when either is missing)
    shell = (role == "bashExecution") & pl.all_horizontal(
        pl.col("m_command", "m_output").is_not_null()
    )
    message = (
        pl.when(role.is_not_null() & pl.col("m_content0").is_not_null())
        .then(None)
        .when(role == "bashExecution")
        .then(pl.when(shell).then(pl.lit("$.message.command")))
        .when(role.is_not_null())
        .then(pl.lit("$.message.content"))
        .when(pl.col("type") == "summary")
        .then(pl.lit("$.summary"))
    )
    fmt = pl.col("format")
    return fields.select(
        "fid",
        "line_no",
        text_path=pl.when(fmt == "codex")
        .then(codex)
        .when(fmt.is_in(["claude", "pi"]))
        .then(message),
        text_path2=pl.when(fmt.is_in(["claude", "pi"]) & shell).then(pl.lit("$.message.output")),
    )


def _join_text(parts: pl.Expr) -> pl.Expr:
    return parts.list.eval(pl.element().struct.field("text").drop_nulls()).list.join("\n")


def codex_items(fields: pl.LazyFrame, blocks: pl.LazyFrame) -> pl.LazyFrame:
    """One item per Codex line (both layouts); message parts come from the content blocks."""
    env = pl.col("has_payload")
    legacy_header = legacy_codex_header()
    record_type = (
        pl.when(env)
        .then(pl.col("type"))
        .when(pl.col("record_type").is_not_null())
        .then(pl.col("record_type"))
        .when(legacy_header)
        .then(pl.lit("session_meta"))
        .when(pl.col("type").is_not_null())
        .then(pl.lit("response_item"))
        .otherwise(pl.lit("unknown"))
    )

    def pick(name: str) -> pl.Expr:
        return pl.when(env).then(pl.col(f"p_{name}")).otherwise(pl.col(name))

    item_type = (
        pl.when(env)
        .then(pl.col("p_type"))
        .when(record_type == "response_item")
        .then(pl.col("type"))
    )
    parts = blocks.group_by("fid", "line_no").agg(
        parts=pl.struct(type=pl.col("b_type"), text=pl.col("b_text")).sort_by("part_idx")
    )
    output = pick("output")
    text = (
        pl.when(item_type == "message")
        .then(_join_text(pl.col("parts")))
        .when(item_type.is_in(["function_call"]))
        .then(pick("arguments"))
        .when(item_type == "custom_tool_call")
        .then(pick("input"))
        .when(item_type.is_in(["function_call_output", "custom_tool_call_output"]))
        .then(output)
        .when(item_type == "reasoning")
        .then(pick("summary"))
        .when(item_type.is_in(["local_shell_call", "web_search_call"]))
        .then(pick("action"))
        .when(record_type == "event_msg")
        .then(pl.col("p_message"))
        .when(record_type == "compacted")
        .then(pl.col("p_message"))
    )
    return fields.join(parts, on=["fid", "line_no"], how="left").select(
        "fid",
        "line_no",
        part_idx=pl.lit(0, dtype=pl.Int32),
        ts_text=pl.col("timestamp"),
        record_type=record_type,
        item_type=item_type,
        role=pick("role"),
        name=pick("name"),
        call_id=pick("call_id"),
        text=text,
        parts=pl.when(item_type == "message").then(pl.col("parts")),
        payload_json=pl.col("line"),
        omitted_bytes="omitted_bytes",
        _injected=pl.lit(False),
        _sidechain=pl.lit(False),
    )


def message_items(fields: pl.LazyFrame, blocks: pl.LazyFrame) -> pl.LazyFrame:
    """Items of Claude Code and Pi sessions: one per content block of a message line, one per
    line otherwise. A tool result's role is ``tool``."""
    t = pl.col("type")
    is_message = pl.col("m_role").is_not_null()
    record_type = (
        pl.when(is_message & (pl.col("is_meta") == "true"))
        .then(pl.lit("injected_message"))
        .when(is_message & t.is_in(["user", "assistant", "message"]))
        .then(pl.lit("response_item"))
        .when(t.is_not_null())
        .then(t)
        .otherwise(pl.lit("unknown"))
    )
    role = (
        pl.when(pl.col("m_role").is_in(["toolResult", "bashExecution"]))
        .then(pl.lit("tool"))
        .otherwise(pl.col("m_role"))
    )
    lines = fields.select(
        "fid",
        "line_no",
        ts_text=pl.col("timestamp"),
        record_type=record_type,
        role=role,
        m_role="m_role",
        m_content="m_content",
        has_blocks=pl.col("m_content0").is_not_null(),
        m_tool_name="m_tool_name",
        m_tool_call_id="m_tool_call_id",
        m_command="m_command",
        m_output="m_output",
        summary="summary",
        line="line",
        omitted_bytes="omitted_bytes",
        _injected=(pl.col("is_meta") == "true") | (pl.col("is_compact_summary") == "true"),
        _sidechain=pl.col("is_sidechain") == "true",
    )
    # Lines whose message content is not an array (or that are not messages): one item each.
    single_type = (
        pl.when(pl.col("m_role") == "bashExecution")
        .then(pl.lit("local_shell_call"))
        .when(pl.col("m_role") == "toolResult")
        .then(pl.lit("function_call_output"))
        .when(pl.col("m_role").is_not_null())
        .then(pl.lit("message"))
    )
    single_text = (
        pl.when(pl.col("m_role") == "bashExecution")
        .then(pl.concat_str([pl.col("m_command"), pl.col("m_output")], separator="\n"))
        .when(pl.col("m_role").is_not_null())
        .then(pl.col("m_content"))
        .when(pl.col("record_type") == "summary")
        .then(pl.col("summary"))
    )
    singles = lines.filter(~pl.col("has_blocks")).select(
        "fid",
        "line_no",
        part_idx=pl.lit(0, dtype=pl.Int32),
        ts_text="ts_text",
        record_type="record_type",
        item_type=single_type,
        role="role",
        name=pl.col("m_tool_name"),
        call_id=pl.col("m_tool_call_id"),
        text=single_text,
        parts=pl.when(single_type == "message").then(
            pl.concat_list(pl.struct(type=pl.lit("text"), text=single_text))
        ),
        payload_json="line",
        omitted_bytes="omitted_bytes",
        _injected="_injected",
        _sidechain="_sidechain",
    )
    # Message lines with a content array: one item per block.
    b_type = pl.col("b_type")
    block_item_type = b_type.replace_strict(
        BLOCK_ITEM_TYPES, default=pl.lit("unknown_block"), return_dtype=pl.String
    )
    block_item_type = (
        pl.when((pl.col("m_role") == "toolResult") & (b_type == "text"))
        .then(pl.lit("function_call_output"))
        .otherwise(block_item_type)
    )
    block_role = pl.when(b_type == "tool_result").then(pl.lit("tool")).otherwise(pl.col("role"))
    block_text = (
        pl.when(b_type == "text")
        .then(pl.col("b_text"))
        .when(b_type.is_in(["thinking", "redacted_thinking"]))
        .then(pl.col("b_thinking"))
        .when(b_type == "tool_use")
        .then(pl.col("b_input"))
        .when(b_type == "toolCall")
        .then(pl.col("b_arguments"))
        .when(b_type == "tool_result")
        .then(pl.col("b_content"))
    )
    multi = (
        lines.filter(pl.col("has_blocks"))
        .join(blocks, on=["fid", "line_no"], how="inner")
        .select(
            "fid",
            "line_no",
            part_idx="part_idx",
            ts_text="ts_text",
            record_type="record_type",
            item_type=block_item_type,
            role=block_role,
            name=pl.coalesce(pl.col("b_name"), pl.col("m_tool_name")),
            call_id=pl.coalesce(pl.col("b_id"), pl.col("b_tool_use_id"), pl.col("m_tool_call_id")),
            text=block_text,
            parts=pl.when(block_item_type == "message").then(
                pl.concat_list(pl.struct(type=b_type, text=pl.col("b_text")))
            ),
            payload_json=pl.col("b_json"),
            omitted_bytes=pl.when(pl.col("part_idx") == 0)
            .then(pl.col("omitted_bytes"))
            .otherwise(pl.lit(0, dtype=pl.Int32)),
            _injected="_injected",
            _sidechain="_sidechain",
        )
    )
    return pl.concat([singles, multi], how="vertical_relaxed")


def build_items(
    fields: pl.LazyFrame, blocks: pl.LazyFrame, *, fill_timestamps: bool = True
) -> pl.LazyFrame:
    """All items of a batch, in file order, with timestamps carried forward within a file.

    ``fill_timestamps=False`` leaves a line without a timestamp null, for items built part by
    part of a file: :func:`fill_timestamps` carries them forward once the parts are joined.
    """
    codex = codex_items(
        fields.filter(pl.col("format") == "codex"),
        blocks.join(
            fields.filter(pl.col("format") == "codex").select("fid", "line_no"),
            on=["fid", "line_no"],
            how="semi",
        ),
    )
    others = message_items(fields.filter(pl.col("format").is_in(["claude", "pi"])), blocks)
    return (
        pl.concat([codex, others], how="vertical_relaxed")
        .sort("fid", "line_no", "part_idx")
        .with_columns(
            ts=parse_timestamp(pl.col("ts_text")).forward_fill().over("fid")
            if fill_timestamps
            else parse_timestamp(pl.col("ts_text")),
            # a line without a usable type is still stored (never a failed insert)
            record_type=pl.col("record_type").fill_null(pl.lit("unknown")),
        )
        .with_columns(
            provenance=provenance_expr(
                record_type=pl.col("record_type"),
                item_type=pl.col("item_type"),
                role=pl.col("role"),
                parts=pl.col("parts"),
                text=pl.col("text"),
                injected=pl.col("_injected"),
                sidechain=pl.col("_sidechain"),
            )
        )
        .select(ITEM_COLUMNS.keys())
        .cast(ITEM_COLUMNS)
    )


def fill_timestamps(items: pl.LazyFrame) -> pl.LazyFrame:
    """Carry each file's last timestamp forward over items without one (items in file order)."""
    return items.with_columns(ts=pl.col("ts").forward_fill().over("fid"))


#: The line fields :func:`build_rollouts` reads (message texts left out).
ROLLOUT_FIELDS = (
    "fid",
    "line_no",
    "has_payload",
    "type",
    "record_type",
    "id",
    "timestamp",
    "session_id",
    "m_role",
    "p_id",
    "p_session_id",
    "p_timestamp",
    "p_source",
    "p_cwd",
    "cwd",
    "p_originator",
    "p_cli_version",
    "version",
    "agent_id",
    "is_sidechain",
    "entrypoint",
    "p_git",
    "git",
    "git_branch",
    "p_memory_mode",
    "p_forked_from_id",
    "p_parent_thread_id",
)


def rollout_fields(fields: pl.LazyFrame) -> pl.LazyFrame:
    """The narrow part of the line fields that :func:`build_rollouts` needs: its columns, and
    ``env_cwd`` (the cwd an ``<environment_context>`` names) instead of the message texts, so
    the fields of a large file can be kept part by part without its texts."""
    if "env_cwd" in fields.collect_schema().names():
        return fields
    env_cwd = pl.coalesce("p_content", "content").str.extract(r"<cwd>([^<]+)</cwd>", 1)
    return fields.select(*ROLLOUT_FIELDS, env_cwd=env_cwd)


def _first(expr: pl.Expr) -> pl.Expr:
    """The value of the file's first line (by line number) where ``expr`` is not null; the
    order rows arrive in is not relied on."""
    return expr.sort_by("line_no").drop_nulls().first()


def build_rollouts(fields: pl.LazyFrame, items: pl.LazyFrame, files: pl.LazyFrame) -> pl.LazyFrame:
    """One row per file that holds a session: identity, provenance, project and counts.

    ``files`` has ``fid, path, format, n_lines, n_quarantined``.
    """
    fields = rollout_fields(fields)
    fmt = pl.col("format")
    t = pl.col("type")
    codex_meta = pl.col("has_payload") & (t == "session_meta")
    legacy_header = legacy_codex_header()
    pi_header = (t == "session") & ~pl.col("has_payload")
    source_obj = pl.col("p_source").str.starts_with("{")
    codex_source = (
        pl.when(source_obj)
        .then(pl.col("p_source").str.extract(r'^\{\s*"([^"]+)"', 1))
        .otherwise(pl.col("p_source"))
    )
    env_cwd = pl.col("env_cwd")
    # a resumed or forked file holds several session_meta lines: the first (by line number)
    # names the session, a later one with another id is its parent (its lineage)
    meta_id = pl.when(codex_meta).then(pl.coalesce("p_id", "p_session_id"))
    meta_ids = meta_id.sort_by("line_no").drop_nulls()
    own_meta = codex_meta & (pl.col("line_no") == pl.col("line_no").filter(codex_meta).min())
    meta = fields.group_by("fid").agg(
        codex_id=meta_ids.first(),
        lineage_id=meta_ids.filter(meta_ids != meta_ids.first()).first(),
        legacy_id=_first(pl.when(legacy_header).then(pl.col("id"))),
        pi_id=_first(pl.when(pi_header).then(pl.col("id"))),
        claude_session=_first(pl.col("session_id")),
        agent_id=_first(pl.col("agent_id")),
        # a sub-agent's transcript: every line that says is a sidechain's (a main session
        # holding some sidechain lines, as older Claude Code wrote them, is not one)
        sidechain=(pl.col("is_sidechain") == "true").any()
        & ~(pl.col("is_sidechain") == "false").any(),
        header_ts=_first(
            pl.when(own_meta)
            .then(pl.coalesce("p_timestamp", "timestamp"))
            .when(legacy_header | pi_header)
            .then(pl.col("timestamp"))
        ),
        cwd=_first(pl.coalesce(pl.when(own_meta).then(pl.col("p_cwd")), pl.col("cwd"))),
        env_cwd=_first(env_cwd),
        originator=_first(pl.when(own_meta).then(pl.col("p_originator"))),
        cli_version=_first(
            pl.coalesce(pl.when(own_meta).then(pl.col("p_cli_version")), pl.col("version"))
        ),
        source=_first(pl.when(own_meta).then(codex_source)),
        entrypoint=_first(pl.col("entrypoint")),
        git=_first(pl.when(own_meta).then(pl.col("p_git")).when(legacy_header).then("git")),
        git_branch_line=_first(pl.col("git_branch")),
        memory_mode=_first(pl.when(own_meta).then(pl.col("p_memory_mode"))),
        forked_from_id=_first(pl.when(own_meta).then(pl.col("p_forked_from_id"))),
        parent_thread_id=_first(pl.when(own_meta).then(pl.col("p_parent_thread_id"))),
    )
    stats = items.group_by("fid").agg(
        first_ts=pl.col("ts").min(),
        last_ts=pl.col("ts").max(),
        n_items=(pl.col("record_type") == "response_item").sum(),
        n_user_messages=(
            (pl.col("record_type") == "response_item")
            & (pl.col("item_type") == "message")
            & (pl.col("role") == "user")
        ).sum(),
        n_tool_calls=pl.col("item_type")
        .is_in(["function_call", "custom_tool_call", "local_shell_call"])
        .sum(),
        omitted_bytes=pl.col("omitted_bytes").sum(),
    )
    uuid_in_name = pl.col("path").str.extract(
        r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
        r"[^/\\]*$",
        1,
    )
    claude_id = (
        pl.when(pl.col("agent_id").is_not_null())
        .then(pl.concat_str([pl.col("claude_session"), pl.lit(":agent-"), pl.col("agent_id")]))
        .otherwise(pl.col("claude_session"))
    )
    rollout_id = (
        pl.when(fmt == "codex")
        .then(pl.coalesce("codex_id", "legacy_id"))
        .when(fmt == "claude")
        .then(claude_id)
        .when(fmt == "pi")
        .then(pl.col("pi_id"))
    )
    remote = pl.col("git").str.json_path_match("$.repository_url")
    cwd = pl.coalesce("cwd", "env_cwd")
    source = (
        pl.when(fmt == "codex")
        .then(pl.col("source"))
        .when(fmt == "claude")
        .then(pl.coalesce("entrypoint", pl.lit("cli")))
        .otherwise(pl.lit("cli"))
    )
    is_subagent = (
        (pl.col("source") == "subagent")
        | pl.col("parent_thread_id").is_not_null()
        | pl.col("sidechain")
        | pl.col("agent_id").is_not_null()
    )
    started = pl.coalesce(parse_timestamp(pl.col("header_ts")), pl.col("first_ts"))
    return (
        files.join(meta, on="fid", how="inner")
        .join(stats, on="fid", how="left")
        .select(
            "fid",
            rollout_id=pl.coalesce(rollout_id, uuid_in_name),
            path="path",
            format="format",
            source=source,
            originator=pl.when(fmt == "codex")
            .then(pl.col("originator"))
            .when(fmt == "claude")
            .then(pl.lit("claude-code"))
            .otherwise(pl.lit("pi")),
            cli_version="cli_version",
            cwd=cwd,
            project_key=project_key(remote=remote, cwd=cwd),
            git_repository_url=remote,
            git_branch=pl.coalesce(
                pl.col("git").str.json_path_match("$.branch"), pl.col("git_branch_line")
            ),
            git_commit=pl.col("git").str.json_path_match("$.commit_hash"),
            started_at=pl.min_horizontal(started, pl.col("first_ts")),
            updated_at=pl.max_horizontal(started, pl.col("last_ts")),
            memory_mode="memory_mode",
            parent_id=pl.coalesce(
                "parent_thread_id",
                pl.when(pl.col("agent_id").is_not_null()).then(pl.col("claude_session")),
            ),
            forked_from_id=pl.when(fmt == "codex")
            .then(pl.coalesce("forked_from_id", "lineage_id"))
            .otherwise(pl.col("forked_from_id")),
            is_subagent=is_subagent.fill_null(False),
            n_lines="n_lines",
            n_items=pl.col("n_items").fill_null(0),
            n_user_messages=pl.col("n_user_messages").fill_null(0),
            n_tool_calls=pl.col("n_tool_calls").fill_null(0),
            n_quarantined="n_quarantined",
            omitted_bytes=pl.col("omitted_bytes").fill_null(0),
        )
        .filter(pl.col("rollout_id").is_not_null())
    )


#: The text columns of items and rollouts taken from a line: they are redacted once parsed
#: (the line itself is only parsed, in memory). Decoded texts and JSON texts (``payload_json``,
#: a tool call's arguments) alike: the rules find a secret at any escape depth.
ITEM_TEXT_COLUMNS = ("record_type", "item_type", "role", "name", "call_id", "text", "payload_json")
ROLLOUT_TEXT_COLUMNS = (
    "rollout_id",
    "path",
    "source",
    "originator",
    "cli_version",
    "cwd",
    "project_key",
    "git_repository_url",
    "git_branch",
    "git_commit",
    "memory_mode",
    "parent_id",
    "forked_from_id",
)


def redact_items(items: pl.DataFrame, *, rules: RuleSet) -> tuple[pl.DataFrame, dict[str, int]]:
    """Redact every text of items (``ITEM_TEXT_COLUMNS`` and each message part) and count the
    hits per rule. A message's parts are what its ``text`` joins, so they are counted once, in
    ``text``."""
    part = pl.element().struct
    items = items.with_columns(
        parts=pl.col("parts").list.eval(
            pl.struct(type=part.field("type"), text=redact_expr(part.field("text"), rules=rules))
        )
    )
    return redact_frame_counted(items, ITEM_TEXT_COLUMNS, rules=rules)


def redact_rollouts(
    rollouts: pl.DataFrame, *, rules: RuleSet
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Redact a rollout's texts (``ROLLOUT_TEXT_COLUMNS``: its id, path, cwd, git remote and
    project key included; they name folders and reach prompts) and count the hits per rule."""
    return redact_frame_counted(rollouts, ROLLOUT_TEXT_COLUMNS, rules=rules)
