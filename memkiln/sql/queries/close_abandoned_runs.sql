-- Runs still `running` when a new run starts (and holds the store) belong to a process that
-- is gone: close them, except the parent of the new run.
update runs
set
    status = 'abandoned',
    ended_at = coalesce(ended_at, $at),
    error = coalesce(error, 'the process ended without closing this run; closed by run ' || $run_id)
where status = 'running'
    and run_id <> $run_id
    and run_id is distinct from $parent_run_id;
