-- Audit: every (rollout_id, seq) appears once in items. Must return zero rows.
select rollout_id, seq, count(*) as copies
from items
group by rollout_id, seq
having count(*) > 1;
