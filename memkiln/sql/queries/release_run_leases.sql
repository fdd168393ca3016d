-- A run that stops (interrupted or failed) hands back the stage-one jobs it still holds.
update stage1_jobs
set status = 'pending', owner = null, lease_until = null, updated_at = $at
where status = 'running' and owner = $run_id;
