-- Every session (and every file that gave none) that has no memory in a project folder, with
-- the fixed reason why: its selection decision, its extraction outcome, or its project's
-- consolidation. A row whose reason is null would be a session nobody can explain.
with in_memory as (
    select distinct unnest(selected_ids) as rollout_id
    from consolidation_jobs
    where status = 'succeeded'
),

sessions as (
    select
        r.rollout_id,
        r.path,
        coalesce(r.project_key, 'unknown-project') as project_key,
        d.decision,
        d.reason as selection_reason,
        j.status as job_status,
        j.last_reason,
        o.rollout_id is not null as has_output,
        c.status as project_status
    from rollouts as r
    left join selection_decisions as d using (rollout_id)
    left join stage1_jobs as j using (rollout_id)
    left join stage1_outputs as o using (rollout_id)
    left join consolidation_jobs as c on c.project_key = coalesce(r.project_key, 'unknown-project')
    where r.rollout_id not in (select rollout_id from in_memory)
),

explained as (
    select
        rollout_id,
        path,
        case
            when has_output and project_status = 'succeeded' then 'over_project_memory_limit'
            when has_output and project_status = 'failed' then 'consolidation_failed'
            when has_output then 'not_consolidated_yet'
            when job_status = 'succeeded_no_output' then 'no_output'
            when job_status = 'failed' then 'failed:' || coalesce(last_reason, 'unknown')
            when job_status in ('pending', 'running') then 'pending'
            when decision = 'skip' then selection_reason
            when decision = 'take' then 'selected_not_finished'
            else 'not_selected_yet'
        end as reason
    from sessions
),

files_without_session as (
    select
        null::varchar as rollout_id,
        path,
        'file_' || status as reason
    from files
    where rollout_id is null or status not in ('ok', 'partial')
)

select * from explained
union all
select * from files_without_session
order by reason, path;
