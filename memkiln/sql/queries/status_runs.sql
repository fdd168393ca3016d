-- The latest commands (a `memkiln run` is one row: its phases carry its run id as parent),
-- newest first.
select
    run_id,
    command,
    status,
    started_at,
    ended_at,
    date_diff('millisecond', started_at, coalesce(ended_at, now())) / 1000.0 as seconds,
    files_new + files_changed as files_read,
    rollouts,
    items,
    sessions_succeeded,
    sessions_no_output,
    sessions_failed,
    projects_written,
    projects_failed,
    cost_usd,
    error
from runs
where parent_run_id is null
order by started_at desc
limit $limit;
