-- The jobs of batch_items are held by the batch until its outcomes are applied.
update stage1_jobs
set owner = $owner, lease_until = $lease, updated_at = $at
where rollout_id in (select rollout_id from batch_items)
