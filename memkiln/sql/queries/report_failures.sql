-- What failed in memkiln itself, and why: one row per stage and reason, with an example.
-- The agents' own failed tool calls are not memkiln's failures: report_tool_failures.sql.
with failures as (
    select 'extract' as stage, reason, detail as example
    from stage1_attempts
    where outcome = 'failed'
    union all
    select 'ingest (input set aside)', reason, detail
    from quarantine
    union all
    select 'consolidate', coalesce(last_reason, 'unknown'), last_error
    from consolidation_jobs
    where status = 'failed'
    union all
    select 'run', command || ' ' || status, error
    from runs
    where status in ('failed', 'interrupted', 'abandoned')
)
select
    stage,
    coalesce(reason, 'unknown') as reason,
    count(*) as failures,
    max(example) as example
from failures
group by all
order by failures desc, stage, reason;
