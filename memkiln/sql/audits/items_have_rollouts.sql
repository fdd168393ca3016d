-- Audit: no item without its session. Must return zero rows.
select i.rollout_id, count(*) as items
from items as i
anti join rollouts as r using (rollout_id)
group by i.rollout_id;
