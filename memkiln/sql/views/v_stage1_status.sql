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
comment on view v_stage1_status is 'Each session with its stage-one job state and current output, for notebooks.';
comment on column v_stage1_status.rollout_id is 'Session id.';
comment on column v_stage1_status.project_key is 'The project.';
comment on column v_stage1_status.format is 'codex | claude | pi.';
comment on column v_stage1_status.updated_at is 'Last timestamp of the session.';
comment on column v_stage1_status.status is 'Job state: pending | running | succeeded | succeeded_no_output | failed; null without a job.';
comment on column v_stage1_status.attempts is 'Attempts charged for this version.';
comment on column v_stage1_status.last_reason is 'Reason of the last failure.';
comment on column v_stage1_status.retry_at is 'Not retried before this time.';
comment on column v_stage1_status.rollout_slug is 'Short name of the stored output.';
comment on column v_stage1_status.backend is 'Backend of the stored output.';
comment on column v_stage1_status.model is 'Model of the stored output.';
comment on column v_stage1_status.raw_memory_chars is 'Characters of the stored raw memory.';
comment on column v_stage1_status.up_to_date is 'The stored output was made from the current version of the session.';
