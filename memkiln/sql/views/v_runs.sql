-- Runs, newest first, with their duration.
create or replace view v_runs as
select
    run_id,
    command,
    status,
    started_at,
    ended_at,
    date_diff('millisecond', started_at, ended_at) / 1000.0 as seconds,
    files_seen,
    files_new,
    files_changed,
    files_skipped,
    files_failed,
    rollouts,
    items,
    quarantined,
    error
from runs
order by started_at desc;
