-- A new run, running.
insert into runs (
    run_id, command, archive, started_at, status, parent_run_id, flow_run_id, pid
)
values ($run_id, $command, $archive, $started_at, 'running', $parent, $flow_run, $pid)
