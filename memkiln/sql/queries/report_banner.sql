-- The report's banner: the latest run (a `memkiln run` with its phases, or a standalone
-- command), whether it was a dry run, and what it did.
select
    r.run_id,
    r.command,
    r.status,
    r.run_id in (select run_id from run_estimates) as dry_run,
    r.started_at,
    r.ended_at,
    date_diff('millisecond', r.started_at, r.ended_at) / 1000.0 as seconds,
    r.sessions_succeeded + r.sessions_no_output + r.sessions_failed as sessions_done,
    r.sessions_succeeded,
    r.sessions_no_output,
    r.sessions_failed,
    r.projects_written,
    r.projects_failed,
    r.model_requests,
    r.cost_usd,
    r.phases,
    r.error
from v_runs as r
where not r.is_phase
order by r.started_at desc
limit 1;
