-- One row per tool call, paired with its output at ingest (memkiln/transforms/tool_calls.py),
-- so "which calls failed, and why" is a query rather than per-format regexes over items.
create table if not exists tool_calls (
    rollout_id    varchar not null,
    seq           integer not null,
    file_id       bigint not null,
    call_id       varchar,
    tool          varchar not null,
    command       varchar,
    started_at    timestamptz,
    ended_at      timestamptz,
    duration_ms   bigint,
    exit_code     integer,
    is_error      boolean,
    failed        boolean not null,
    has_output    boolean not null,
    output_chars  bigint,
    error_line    varchar
);
comment on table tool_calls is 'One row per tool call of a session (all three formats), paired with its output by call id at ingest. Texts come from redacted items.';
comment on column tool_calls.rollout_id is 'The session (rollouts.rollout_id).';
comment on column tool_calls.seq is 'The call''s item (items.seq); (rollout_id, seq) is unique.';
comment on column tool_calls.file_id is 'The file it was read from (files.file_id).';
comment on column tool_calls.call_id is 'Id pairing the call with its output.';
comment on column tool_calls.tool is 'Tool name (exec_command, shell, apply_patch, Bash, Read, bash, ...; local_shell for a Codex local shell call).';
comment on column tool_calls.command is 'The shell command, when the call ran one (redacted); null for other tools.';
comment on column tool_calls.started_at is 'Timestamp of the call (UTC).';
comment on column tool_calls.ended_at is 'Timestamp of its output (UTC); null when no output was recorded.';
comment on column tool_calls.duration_ms is 'Wall time the agent reported, else the time from the call to its output, in ms; null when unknown.';
comment on column tool_calls.exit_code is 'Exit code of a shell command, when the output states one.';
comment on column tool_calls.is_error is 'The agent marked the result an error (Claude Code is_error, Pi isError); null without an output.';
comment on column tool_calls.failed is 'True when the result is marked an error or the exit code is not 0.';
comment on column tool_calls.has_output is 'An output was recorded for the call.';
comment on column tool_calls.output_chars is 'Characters of the output (redacted).';
comment on column tool_calls.error_line is 'First line of a failed call''s output that reads like an error (at most 200 characters).';
-- Sessions stored before this table existed have no rows in it: forget the fingerprints of
-- readable files, so the next ingest reads them once more and fills it (their sessions,
-- whose content is unchanged, are not extracted again).
update files set mtime_ns = -1 where status in ('ok', 'partial');
