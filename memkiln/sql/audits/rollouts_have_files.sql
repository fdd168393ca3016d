-- Audit: every session points at a known file, and that file points back at it. Must return zero rows.
select r.rollout_id, r.file_id
from rollouts as r
left join files as f on f.file_id = r.file_id
where f.file_id is null or f.rollout_id is distinct from r.rollout_id;
