-- Sessions, items and extraction tokens per project, day (UTC, of the session's start),
-- format and source: how active each project was, and through which agent.
create or replace view v_sessions_daily as
with sessions as (
    select
        r.rollout_id,
        coalesce(r.project_key, 'unknown-project') as project_key,
        cast(timezone('UTC', coalesce(r.started_at, r.updated_at)) as date) as day,
        r.format,
        coalesce(r.source, '(unknown)') as source,
        r.n_items,
        r.n_user_messages,
        r.n_tool_calls,
        r.is_subagent,
        o.input_tokens,
        o.output_tokens
    from rollouts as r
    left join stage1_outputs as o using (rollout_id)
)
select
    day,
    project_key,
    format,
    source,
    count(*) as sessions,
    count(*) filter (where is_subagent) as subagent_sessions,
    cast(sum(n_items) as bigint) as items,
    cast(sum(n_user_messages) as bigint) as user_messages,
    cast(sum(n_tool_calls) as bigint) as tool_calls,
    cast(coalesce(sum(input_tokens), 0) as bigint) as input_tokens,
    cast(coalesce(sum(output_tokens), 0) as bigint) as output_tokens
from sessions
group by all
order by day, project_key, format, source;
comment on view v_sessions_daily is 'Sessions, items and extraction tokens per project, day (UTC, of the session start), format and source.';
comment on column v_sessions_daily.day is 'Day the sessions started (UTC).';
comment on column v_sessions_daily.project_key is 'The project; unknown-project when a session has neither remote nor cwd.';
comment on column v_sessions_daily.format is 'codex | claude | pi.';
comment on column v_sessions_daily.source is 'cli | vscode | exec | subagent | ...; (unknown) when not recorded.';
comment on column v_sessions_daily.sessions is 'Sessions started that day.';
comment on column v_sessions_daily.subagent_sessions is 'Of which sub-agent sessions.';
comment on column v_sessions_daily.items is 'Conversation items of those sessions.';
comment on column v_sessions_daily.user_messages is 'User messages of those sessions.';
comment on column v_sessions_daily.tool_calls is 'Tool calls of those sessions.';
comment on column v_sessions_daily.input_tokens is 'Stage-one input tokens of their current outputs.';
comment on column v_sessions_daily.output_tokens is 'Stage-one output tokens of their current outputs.';
