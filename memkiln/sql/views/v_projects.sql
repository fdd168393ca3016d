-- One row per project: sessions, memories and its memory folder.
create or replace view v_projects as
with sessions as (
    select project_key, format, rollout_id, updated_at, n_items
    from rollouts
    where project_key is not null
),
per_project as (
    select
        project_key,
        count(*) as sessions,
        count(distinct format) as formats,
        sum(n_items) as items,
        min(updated_at) as first_active_at,
        max(updated_at) as last_active_at
    from sessions
    group by project_key
)
select
    p.*,
    c.folder,
    c.memories,
    c.status as consolidation_status,
    c.last_success_at as consolidated_at
from per_project as p
left join consolidation_jobs as c using (project_key);
