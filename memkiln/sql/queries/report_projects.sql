-- Which projects are active: sessions in the $days days up to the newest session in the
-- database (not up to today, so an old archive still shows its active projects), with their
-- coverage, tool calls and memory folder.
with newest as (
    select max(updated_at) as at from rollouts
),
recent as (
    select project_key, count(*) as recent_sessions
    from rollouts, newest
    where updated_at >= newest.at - to_days(cast($days as integer))
    group by project_key
),
calls as (
    select
        project_key,
        count(*) as tool_calls,
        count(*) filter (where failed) as failed_tool_calls
    from v_tool_calls
    group by project_key
)
select
    p.project_key,
    p.sessions,
    coalesce(r.recent_sessions, 0) as recent_sessions,
    p.last_active_at,
    c.extracted,
    c.no_output,
    c.failed,
    c.eligible,
    coalesce(t.tool_calls, 0) as tool_calls,
    coalesce(t.failed_tool_calls, 0) as failed_tool_calls,
    p.memories,
    p.folder
from v_projects as p
left join v_coverage as c using (project_key)
left join recent as r using (project_key)
left join calls as t using (project_key)
order by recent_sessions desc, p.last_active_at desc nulls last, p.project_key;
