-- Give back the attempt used by transient failures ($transient) of sessions that failed while
-- the whole service was failing: the run stopped on a streak of them.
update stage1_jobs
set attempts = greatest(attempts - 1, 0), updated_at = $at
where
    rollout_id in (select unnest($ids))
    and status = 'failed'
    and list_contains($transient, last_reason)
returning rollout_id;
