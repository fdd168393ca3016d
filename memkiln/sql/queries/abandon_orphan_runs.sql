-- Runs still marked running that hold orphaned jobs are closed as abandoned.
update runs
set status = 'abandoned', ended_at = coalesce(ended_at, $at)
where status = 'running'
    and run_id <> $run_id
    and run_id in (select owner from stage1_jobs where status = 'running')
