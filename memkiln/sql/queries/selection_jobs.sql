-- Stage-one jobs with what made each session's stored output, for candidate selection.
select
    j.rollout_id,
    j.status,
    j.owner,
    j.lease_until,
    j.attempts,
    j.source_watermark,
    j.done_watermark,
    j.retry_at,
    o.backend as output_backend,
    o.model as output_model,
    o.prompt_version as output_prompt_version
from stage1_jobs as j
left join stage1_outputs as o using (rollout_id);
