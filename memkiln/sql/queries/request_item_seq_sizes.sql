-- One session's items a model may be shown (as in request_item_sizes), each with its size:
-- the plan of the pieces a very large session is read in, in order.
select seq, coalesce(length(text), 0) + $overhead as chars
from items
where rollout_id = $id
    and record_type = any($record_types)
    and item_type = any($item_types)
    and not (item_type = 'message' and coalesce(role = any($dropped_roles), false))
order by seq
