-- Per project: how many sessions could have a memory, and what happened to them. The fixed
-- skip rules (sub-agent, memory disabled, no user message) are the ones of
-- memkiln/transforms/selection.py; a session without a job was not selected by any run so far
-- (its source was not in --sources, it was older than --max-age-days, or still active).
create or replace view v_coverage as
with sessions as (
    select
        coalesce(r.project_key, 'unknown-project') as project_key,
        case
            when r.is_subagent then 'subagent'
            when lower(coalesce(r.memory_mode, '')) in ('disabled', 'polluted')
                then 'memory_disabled'
            when r.n_user_messages = 0 then 'no_user_message'
        end as skipped,
        j.status
    from rollouts as r
    left join stage1_jobs as j using (rollout_id)
)
select
    project_key,
    count(*) as sessions,
    count(*) filter (where skipped is null) as eligible,
    count(*) filter (where skipped is null and status = 'succeeded') as extracted,
    count(*) filter (where skipped is null and status = 'succeeded_no_output') as no_output,
    count(*) filter (where skipped is null and status = 'failed') as failed,
    count(*) filter (where skipped is null and status in ('pending', 'running')) as pending,
    count(*) filter (where skipped is null and status is null) as not_selected,
    count(*) filter (where skipped = 'subagent') as skipped_subagent,
    count(*) filter (where skipped = 'memory_disabled') as skipped_memory_disabled,
    count(*) filter (where skipped = 'no_user_message') as skipped_no_user_message,
    round(
        (count(*) filter (where skipped is null and status in ('succeeded', 'succeeded_no_output')))
        / nullif(count(*) filter (where skipped is null), 0),
        3
    ) as done_share
from sessions
group by project_key
order by project_key;
comment on view v_coverage is 'Per project: sessions eligible for a memory, extracted, with no output, failed, pending, not selected, and skipped by reason.';
comment on column v_coverage.project_key is 'The project; unknown-project when a session has neither remote nor cwd.';
comment on column v_coverage.sessions is 'All its sessions.';
comment on column v_coverage.eligible is 'Sessions not skipped by a fixed rule (sub-agent, memory disabled, no user message).';
comment on column v_coverage.extracted is 'Eligible sessions whose job succeeded with a memory.';
comment on column v_coverage.no_output is 'Eligible sessions whose answer was "nothing durable".';
comment on column v_coverage.failed is 'Eligible sessions whose last attempt failed.';
comment on column v_coverage.pending is 'Eligible sessions waiting (pending, or running now).';
comment on column v_coverage.not_selected is 'Eligible sessions no run has selected (source not in --sources, older than --max-age-days, or still active).';
comment on column v_coverage.skipped_subagent is 'Sessions skipped: sub-agent.';
comment on column v_coverage.skipped_memory_disabled is 'Sessions skipped: memory disabled by the agent.';
comment on column v_coverage.skipped_no_user_message is 'Sessions skipped: no user message.';
comment on column v_coverage.done_share is 'Share of eligible sessions extracted or with no output (0 to 1); null without eligible sessions.';
