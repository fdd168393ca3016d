-- The latest commands (a `memkiln run` is one row: its phases carry its run id as parent),
-- newest first. A run still going shows what it has done so far: its counters are written
-- when it ends, so its sessions, items, projects and cost are counted from what it and its
-- phases stored (sessions and items read, stage-one attempts, projects consolidated since it
-- started, the cost of its attempts and of its phases' recorded model usage).
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
        count(*) filter (where a.outcome = 'failed') as failed,
        sum(a.cost_usd) as cost_usd
    from family as f
    join stage1_attempts as a on a.run_id = f.run_id
    group by f.top_id
),
live_rollouts as (
    select f.top_id, count(*) as rollouts, sum(o.n_items) as items
    from family as f
    join rollouts as o on o.run_id = f.run_id
    group by f.top_id
),
live_projects as (  -- one run writes at a time (the store's lock): what changed since it began
    select
        l.run_id as top_id,
        count(*) filter (where c.status = 'succeeded' and c.last_success_at >= l.started_at)
            as written,
        count(*) filter (where c.status = 'failed' and c.updated_at >= l.started_at) as failed
    from latest as l
    join consolidation_jobs as c on c.updated_at >= l.started_at
    where l.status = 'running'
    group by l.run_id
),
live_usage as (  -- phase 2's cost, recorded when its phase ends
    select f.top_id, sum(u.cost_usd) as cost_usd
    from family as f
    join model_usage as u on u.run_id = f.run_id
    where u.kind = 'actual' and u.phase = 'consolidate'
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
    greatest(l.items, coalesce(o.items, 0)) as items,
    greatest(l.sessions_succeeded, coalesce(s.succeeded, 0)) as sessions_succeeded,
    greatest(l.sessions_no_output, coalesce(s.no_output, 0)) as sessions_no_output,
    greatest(l.sessions_failed, coalesce(s.failed, 0)) as sessions_failed,
    greatest(l.projects_written, coalesce(p.written, 0)) as projects_written,
    greatest(l.projects_failed, coalesce(p.failed, 0)) as projects_failed,
    case
        when l.status = 'running'
            then coalesce(s.cost_usd, 0) + coalesce(u.cost_usd, 0)
        else l.cost_usd
    end as cost_usd,
    l.error
from latest as l
left join live_sessions as s on s.top_id = l.run_id
left join live_rollouts as o on o.top_id = l.run_id
left join live_projects as p on p.top_id = l.run_id
left join live_usage as u on u.top_id = l.run_id
order by l.started_at desc;
