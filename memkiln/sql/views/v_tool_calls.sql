-- One row per tool call with its session's project: what ran, how long, and whether it failed.
create or replace view v_tool_calls as
select
    t.rollout_id,
    r.project_key,
    r.format,
    t.seq,
    t.tool,
    t.command,
    t.failed,
    t.exit_code,
    t.is_error,
    t.duration_ms,
    t.started_at,
    cast(timezone('UTC', t.started_at) as date) as day,
    t.has_output,
    t.error_line,
    t.call_id
from tool_calls as t
left join rollouts as r using (rollout_id);
comment on view v_tool_calls is 'One row per tool call (all three formats) with its session''s project: tool, command, failed, exit code, duration.';
comment on column v_tool_calls.rollout_id is 'The session.';
comment on column v_tool_calls.project_key is 'The session''s project.';
comment on column v_tool_calls.format is 'codex | claude | pi.';
comment on column v_tool_calls.seq is 'The call''s item (items.seq).';
comment on column v_tool_calls.tool is 'Tool name.';
comment on column v_tool_calls.command is 'Shell command run, redacted; null for other tools.';
comment on column v_tool_calls.failed is 'Marked an error, or a non-zero exit code.';
comment on column v_tool_calls.exit_code is 'Exit code, when the output states one.';
comment on column v_tool_calls.is_error is 'The agent marked the result an error; null without an output.';
comment on column v_tool_calls.duration_ms is 'Duration in ms, when known.';
comment on column v_tool_calls.started_at is 'When the call was made (UTC).';
comment on column v_tool_calls.day is 'Day of the call (UTC).';
comment on column v_tool_calls.has_output is 'An output was recorded.';
comment on column v_tool_calls.error_line is 'First error-like line of a failed call''s output.';
comment on column v_tool_calls.call_id is 'Id pairing the call with its output.';
