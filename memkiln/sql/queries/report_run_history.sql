-- Run history: the latest $limit runs (a `memkiln run` is one row with its phases), oldest
-- first, with what each did, whether it was a dry run, and how long it took.
with latest as (
    select *
    from v_runs
    where not is_phase
    order by started_at desc
    limit $limit
)
select
    started_at,
    command,
    status,
    run_id in (select run_id from run_estimates) as dry_run,
    seconds,
    sessions_succeeded + sessions_no_output + sessions_failed as sessions_done,
    sessions_failed,
    projects_written,
    projects_failed,
    model_requests,
    cost_usd
from latest
order by started_at;
