-- Job states after a batch of outcomes: done (with its watermark) or failed (retry later).
-- Every outcome but `reused` uses one attempt, except run-wide failures ($uncharged).
-- A failure of the service ($retry_now) may be retried by the next run at once; any other
-- failure waits until $retry_at.
update stage1_jobs as j
set
    status = case
        when f.outcome = 'failed' then 'failed'
        when f.outcome = 'succeeded_no_output' then 'succeeded_no_output'
        else 'succeeded'
    end,
    attempts = j.attempts + case
        when f.outcome = 'reused' or list_contains($uncharged, f.reason) then 0
        else 1
    end,
    owner = null,
    lease_until = null,
    retry_at = case
        when f.outcome = 'failed' and not list_contains($retry_now, f.reason) then $retry_at
    end,
    done_watermark = case when f.outcome = 'failed' then j.done_watermark else f.watermark end,
    last_reason = case when f.outcome = 'failed' then f.reason end,
    last_error = case when f.outcome = 'failed' then f.detail end,
    updated_at = $at
from finished as f
where f.rollout_id = j.rollout_id;
