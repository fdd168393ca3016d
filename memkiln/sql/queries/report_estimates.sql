-- Each dry run's estimate beside what the next run of the same command (not a dry run) then
-- did and spent, newest first. The estimate counts sessions to extract and the projects they
-- belong to (each may get new memories); the run, the sessions it extracted and the projects
-- it wrote (a session with nothing durable adds no memory, so fewer projects may be written).
with dry as (
    select e.*, r.command, r.started_at
    from run_estimates as e
    join runs as r using (run_id)
    where r.parent_run_id is null
),
estimated_requests as (
    select coalesce(r.parent_run_id, r.run_id) as run_id, sum(u.requests) as requests
    from model_usage as u
    join runs as r using (run_id)
    where u.kind = 'estimate'
    group by all
),
ran as (
    select *
    from runs
    where parent_run_id is null
      and status <> 'running'
      and run_id not in (select run_id from run_estimates)
)
select
    d.started_at as estimated_at,
    d.command,
    d.sessions_to_do,
    d.projects_to_do as projects_with_sessions_to_do,
    cast(coalesce(q.requests, 0) as bigint) as estimated_model_requests,
    d.input_tokens + d.output_tokens as estimated_tokens,
    d.cost_usd as estimated_cost_usd,
    n.started_at as ran_at,
    n.status as run_status,
    n.sessions_succeeded + n.sessions_no_output + n.sessions_failed as sessions_done,
    n.projects_written,
    n.model_requests,
    n.input_tokens + n.output_tokens as tokens,
    n.cost_usd as spent_usd
from dry as d
left join estimated_requests as q using (run_id)
asof left join ran as n on d.command = n.command and d.started_at < n.started_at
order by d.started_at desc
limit $limit;
