-- The sessions of a chunk of stage-one requests: what the message's header shows.
select rollout_id, path, cwd, updated_at
from rollouts
where rollout_id = any($ids)
