-- One row per project: how many sessions it holds and when it was last active.
create or replace view v_projects as
with sessions as (
    select project_key, format, rollout_id, updated_at, n_items
    from rollouts
    where project_key is not null
)
select
    project_key,
    count(*) as sessions,
    count(distinct format) as formats,
    sum(n_items) as items,
    min(updated_at) as first_active_at,
    max(updated_at) as last_active_at
from sessions
group by project_key;
