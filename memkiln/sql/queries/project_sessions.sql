-- Sessions and last activity per project, for INDEX.md.
select
    coalesce(project_key, 'unknown-project') as project_key,
    count(*) as sessions,
    max(updated_at) as last_update
from rollouts
group by all;
