-- Mark the jobs of claim_batch (rollout_id, watermark) running under this run's lease. A
-- claim charges nothing; a new version of a session, or one done before and taken again,
-- starts its retry budget again.
insert into stage1_jobs as j (
    rollout_id, status, owner, lease_until, attempts, source_watermark, updated_at
)
select rollout_id, 'running', $run_id, $lease, 0, watermark, $at
from claim_batch
on conflict (rollout_id) do update set
    status = 'running',
    owner = excluded.owner,
    lease_until = excluded.lease_until,
    attempts = case
        when j.source_watermark is not distinct from excluded.source_watermark
            and j.status not in ('succeeded', 'succeeded_no_output')
            then j.attempts
        else 0
    end,
    source_watermark = excluded.source_watermark,
    updated_at = excluded.updated_at
