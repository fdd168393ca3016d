-- Job states after a batch of outcomes: done (with its watermark) or failed (retry later).
update stage1_jobs as j
set
    status = case
        when f.outcome = 'failed' then 'failed'
        when f.outcome = 'succeeded_no_output' then 'succeeded_no_output'
        else 'succeeded'
    end,
    owner = null,
    lease_until = null,
    retry_at = case when f.outcome = 'failed' then $retry_at end,
    done_watermark = case when f.outcome = 'failed' then j.done_watermark else f.watermark end,
    last_reason = case when f.outcome = 'failed' then f.reason end,
    last_error = case when f.outcome = 'failed' then f.detail end,
    updated_at = $at
from finished as f
where f.rollout_id = j.rollout_id;
