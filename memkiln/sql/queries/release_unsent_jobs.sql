-- This run's claimed jobs that were never sent (a run stopped early) go back to pending.
update stage1_jobs
set status = 'pending', owner = null, lease_until = null, updated_at = $at
where status = 'running' and owner = $run_id
returning rollout_id
