-- Current stage-one outputs with the session facts phase 2 needs. A session with neither a
-- git remote nor a working directory goes to the project `unknown-project`.
select
    coalesce(r.project_key, 'unknown-project') as project_key,
    o.rollout_id,
    r.cwd,
    r.updated_at,
    o.raw_memory,
    o.rollout_summary,
    o.rollout_slug,
    o.input_hash,
    o.created_at
from stage1_outputs as o
join rollouts as r using (rollout_id);
