-- The latest commands (a `memkiln run` is one row: its phases carry its run id as parent),
-- newest first. A run still going shows what it has done so far: its counters are written
-- when it ends, so its sessions and rollouts are counted from what it and its phases stored.
with latest as (
    select *
    from runs
    where parent_run_id is null
    order by started_at desc
    limit $limit
),
family as (  -- a running command and its phases
    select l.run_id as top_id, r.run_id
    from latest as l
    join runs as r on r.run_id = l.run_id or r.parent_run_id = l.run_id
    where l.status = 'running'
),
live_sessions as (
    select
        f.top_id,
        count(*) filter (where a.outcome = 'succeeded') as succeeded,
        count(*) filter (where a.outcome = 'succeeded_no_output') as no_output,
        count(*) filter (where a.outcome = 'failed') as failed
    from family as f
    join stage1_attempts as a on a.run_id = f.run_id
    group by f.top_id
),
live_rollouts as (
    select f.top_id, count(*) as rollouts
    from family as f
    join rollouts as o on o.run_id = f.run_id
    group by f.top_id
)
select
    l.run_id,
    l.command,
    l.status,
    l.started_at,
    l.ended_at,
    date_diff('millisecond', l.started_at, coalesce(l.ended_at, now())) / 1000.0 as seconds,
    l.files_new + l.files_changed as files_read,
    greatest(l.rollouts, coalesce(o.rollouts, 0)) as rollouts,
    l.items,
    greatest(l.sessions_succeeded, coalesce(s.succeeded, 0)) as sessions_succeeded,
    greatest(l.sessions_no_output, coalesce(s.no_output, 0)) as sessions_no_output,
    greatest(l.sessions_failed, coalesce(s.failed, 0)) as sessions_failed,
    l.projects_written,
    l.projects_failed,
    l.cost_usd,
    l.error
from latest as l
left join live_sessions as s on s.top_id = l.run_id
left join live_rollouts as o on o.top_id = l.run_id
order by l.started_at desc;
