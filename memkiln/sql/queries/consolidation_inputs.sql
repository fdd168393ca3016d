-- Current stage-one outputs with the session facts phase 2 needs.
select
    r.project_key,
    o.rollout_id,
    r.cwd,
    r.updated_at,
    o.raw_memory,
    o.rollout_summary,
    o.rollout_slug,
    o.input_hash,
    o.created_at
from stage1_outputs as o
join rollouts as r using (rollout_id)
where r.project_key is not null;
