-- The items of a chunk's sessions, for filtering and rendering (the raw payload is not read).
select * exclude (payload_json)
from items
where rollout_id = any($ids)
