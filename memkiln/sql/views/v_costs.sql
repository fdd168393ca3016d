-- Tokens and cost per day (UTC), project, backend, model and phase. Stage one is counted per
-- attempt (stage1_attempts, failed attempts included); phase 2 records its usage per run
-- only, so its rows have no project. `attempts` counts attempts, not model requests (a session
-- sent in chunks is one attempt of several requests; the heuristic backend sends none): the
-- model requests of a run, as its summary counts them, are in model_usage.
create or replace view v_costs as
with extract_attempts as (
    select
        cast(timezone('UTC', a.started_at) as date) as day,
        coalesce(r.project_key, 'unknown-project') as project_key,
        'extract' as phase,
        a.backend,
        a.model,
        a.outcome,
        a.input_tokens,
        a.output_tokens,
        a.cost_usd
    from stage1_attempts as a
    left join rollouts as r using (rollout_id)
),
consolidate_runs as (
    select
        cast(timezone('UTC', started_at) as date) as day,
        null as project_key,
        'consolidate' as phase,
        null as backend,
        null as model,
        status as outcome,
        input_tokens,
        output_tokens,
        cost_usd
    from runs
    where command = 'consolidate'
),
usage as (
    select * from extract_attempts
    union all
    select * from consolidate_runs
)
select
    day,
    project_key,
    phase,
    backend,
    model,
    count(*) as attempts,
    count(*) filter (where outcome = 'failed') as failed_attempts,
    cast(sum(input_tokens) as bigint) as input_tokens,
    cast(sum(output_tokens) as bigint) as output_tokens,
    sum(cost_usd) as cost_usd
from usage
group by all
order by day, phase, project_key, backend, model;
comment on view v_costs is 'Tokens and cost per day (UTC), project, phase, backend and model (stage one per attempt; phase 2 per run, without a project).';
comment on column v_costs.day is 'Day (UTC) of the attempt or run.';
comment on column v_costs.project_key is 'The project of the session extracted (unknown-project when it has neither remote nor cwd); null for phase 2.';
comment on column v_costs.phase is 'extract (stage one) | consolidate (phase 2).';
comment on column v_costs.backend is 'Backend; null for phase 2 (recorded per run).';
comment on column v_costs.model is 'Model; null for phase 2 (recorded per run).';
comment on column v_costs.attempts is 'Stage-one attempts (one per session tried; a retry is another) for extract, phase-2 runs for consolidate; not model requests (model_usage.requests counts those, as the run summary does).';
comment on column v_costs.failed_attempts is 'Of which failed.';
comment on column v_costs.input_tokens is 'Input tokens.';
comment on column v_costs.output_tokens is 'Output tokens.';
comment on column v_costs.cost_usd is 'Cost in US dollars.';
