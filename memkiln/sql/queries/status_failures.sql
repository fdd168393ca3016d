-- The reasons sessions and projects are failed now (each job's latest failure), most
-- frequent first, with one (redacted) example of the error.
with failures as (
    select 'extract' as phase, coalesce(last_reason, 'unknown') as reason, last_error as detail
    from stage1_jobs
    where status = 'failed'
    union all
    select 'consolidate' as phase, coalesce(last_reason, 'unknown') as reason, last_error as detail
    from consolidation_jobs
    where status = 'failed'
)
select phase, reason, count(*) as jobs, left(min(detail), 160) as example
from failures
group by phase, reason
order by jobs desc, phase, reason
limit $limit;
