-- Audit: a stored output belongs to a succeeded job, and a succeeded_no_output job has none.
-- Must return zero rows.
select o.rollout_id, j.status
from stage1_outputs as o
left join stage1_jobs as j using (rollout_id)
where j.status is distinct from 'succeeded'
union all
select j.rollout_id, j.status
from stage1_jobs as j
join stage1_outputs as o using (rollout_id)
where j.status = 'succeeded_no_output';
