-- Attempts used so far by each job of claim_batch.
select j.rollout_id, j.attempts
from stage1_jobs as j
join claim_batch using (rollout_id)
