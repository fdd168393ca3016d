-- What happened last night: the latest run (a `memkiln run` with its phases, or a standalone
-- command), one row per run record, the run itself first; dry_run: it only estimated.
with latest as (
    select group_id
    from v_runs
    order by started_at desc
    limit 1
)
select
    command,
    status,
    group_id in (select run_id from run_estimates) as dry_run,
    started_at,
    seconds,
    rollouts as sessions_stored,
    items,
    sessions_succeeded,
    sessions_no_output,
    sessions_failed,
    model_requests,
    cost_usd,
    projects_written,
    projects_failed,
    error
from v_runs
where group_id = (select group_id from latest)
order by is_phase, started_at;
