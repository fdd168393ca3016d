-- Sessions with their project, for notebooks.
create or replace view v_rollouts as
select
    r.rollout_id,
    r.format,
    r.project_key,
    r.cwd,
    r.source,
    r.originator,
    r.started_at,
    r.updated_at,
    r.is_subagent,
    r.n_items,
    r.n_user_messages,
    r.n_tool_calls,
    r.n_quarantined,
    r.path
from rollouts as r;
comment on view v_rollouts is 'Sessions with their project, for notebooks.';
comment on column v_rollouts.rollout_id is 'Session id.';
comment on column v_rollouts.format is 'codex | claude | pi.';
comment on column v_rollouts.project_key is 'The project.';
comment on column v_rollouts.cwd is 'Working directory, redacted.';
comment on column v_rollouts.source is 'cli | vscode | exec | subagent | ...';
comment on column v_rollouts.originator is 'The client that wrote the session.';
comment on column v_rollouts.started_at is 'First timestamp (UTC).';
comment on column v_rollouts.updated_at is 'Last timestamp (UTC).';
comment on column v_rollouts.is_subagent is 'True for sub-agent sessions.';
comment on column v_rollouts.n_items is 'Conversation items.';
comment on column v_rollouts.n_user_messages is 'User messages.';
comment on column v_rollouts.n_tool_calls is 'Tool calls.';
comment on column v_rollouts.n_quarantined is 'Lines in quarantine.';
comment on column v_rollouts.path is 'The file, redacted.';
