-- One row per tool call with its session's project: what ran, how long, and whether it failed.
-- `tool_kind` names the same kind of tool alike across the three formats (Claude Code's
-- `Bash`, Pi's `bash`, Codex's `shell`, `exec_command` and `shell_command` are all `shell`).
create or replace view v_tool_calls as
with named as (
    select *, lower(tool) as name from tool_calls
)
select
    t.rollout_id,
    r.project_key,
    r.format,
    t.seq,
    t.tool,
    case
        when t.name in (
            'bash', 'shell', 'exec_command', 'shell_command', 'exec', 'local_shell',
            'local_shell_call', 'write_stdin', 'bashoutput', 'killshell', 'run_shell_command'
        ) then 'shell'
        when t.name in ('apply_patch', 'edit', 'multiedit', 'str_replace_editor') then 'edit'
        when t.name in ('read', 'read_file', 'notebookread') then 'read'
        when t.name in ('write', 'write_file', 'create_file', 'notebookedit') then 'write'
        when t.name in ('grep', 'glob', 'find', 'ls', 'search', 'list_dir') then 'search files'
        when t.name in (
            'web_search', 'websearch', 'web_search_call', 'webfetch', 'web_fetch', 'fetch_url',
            'browser'
        ) then 'web'
        when t.name in (
            'update_plan', 'todowrite', 'todoread', 'taskcreate', 'taskupdate', 'set_phase',
            'enterplanmode', 'exitplanmode'
        ) then 'plan'
        when t.name in ('task', 'agent', 'subagent') then 'sub-agent'
        when t.name like 'mcp\_\_%' escape '\' then 'mcp'
        else t.name
    end as tool_kind,
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
from named as t
left join rollouts as r using (rollout_id);
comment on view v_tool_calls is 'One row per tool call (all three formats) with its session''s project: tool, command, failed, exit code, duration.';
comment on column v_tool_calls.rollout_id is 'The session.';
comment on column v_tool_calls.project_key is 'The session''s project.';
comment on column v_tool_calls.format is 'codex | claude | pi.';
comment on column v_tool_calls.seq is 'The call''s item (items.seq).';
comment on column v_tool_calls.tool is 'Tool name, as the agent wrote it.';
comment on column v_tool_calls.tool_kind is 'The kind of tool, named alike across formats: shell (bash, Bash, shell, exec_command, shell_command, ...), edit (apply_patch, edit, Edit, MultiEdit), read, write, search files (grep, glob, find, ls), web, plan (update_plan, TodoWrite, ...), sub-agent (Task, Agent), mcp (any mcp__ tool); another tool by its name in lower case.';
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
