-- Sessions of this batch already held by a file outside it (a duplicate, or a file gone).
select rollout_id, file_id as holder, path as holder_path
from rollouts
where file_id <> all($fids::bigint[]) and rollout_id = any($ids)
