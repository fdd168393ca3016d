-- Each session with its job state and current output, for notebooks.
create or replace view v_stage1_status as
select
    r.rollout_id,
    r.project_key,
    r.format,
    r.updated_at,
    j.status,
    j.attempts,
    j.last_reason,
    j.retry_at,
    o.rollout_slug,
    o.backend,
    o.model,
    length(o.raw_memory) as raw_memory_chars,
    o.watermark = r.updated_at as up_to_date
from rollouts as r
left join stage1_jobs as j using (rollout_id)
left join stage1_outputs as o using (rollout_id);
