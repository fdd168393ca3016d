-- Orphaned stage-one jobs (see orphan_jobs_count) go back to pending.
update stage1_jobs
set status = 'pending', owner = null, lease_until = null, updated_at = $at
where status = 'running' and owner <> $run_id and owner not like 'batch:%'
