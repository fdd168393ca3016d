-- Sessions and last activity per project, for INDEX.md.
select
    project_key,
    count(*) as sessions,
    max(updated_at) as last_update
from rollouts
where project_key is not null
group by project_key;
