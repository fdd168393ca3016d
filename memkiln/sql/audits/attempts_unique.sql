-- Audit: each attempt of a session is recorded once per run (a crash and a rerun must not
-- record it twice). Must return zero rows.
select run_id, rollout_id, attempt, count(*) as copies
from stage1_attempts
group by run_id, rollout_id, attempt
having count(*) > 1;
