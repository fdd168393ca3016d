-- Jobs per phase and state: stage-one jobs (one per session) and consolidation jobs (one per
-- project).
with jobs as (
    select 'extract' as phase, status from stage1_jobs
    union all
    select 'consolidate' as phase, status from consolidation_jobs
)
select phase, status, count(*) as jobs
from jobs
group by phase, status
order by phase desc, jobs desc, status;
