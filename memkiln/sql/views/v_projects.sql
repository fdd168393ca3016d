-- One row per project: sessions, memories and its memory folder.
create or replace view v_projects as
with sessions as (
    -- a session with neither remote nor cwd: the project its memories are written to
    select coalesce(project_key, 'unknown-project') as project_key, format, rollout_id,
        updated_at, n_items
    from rollouts
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
    coalesce(c.memories, 0) as memories,
    c.status as consolidation_status,
    c.last_success_at as consolidated_at
from per_project as p
left join consolidation_jobs as c using (project_key);
comment on view v_projects is 'One row per project: sessions, memories and its memory folder.';
comment on column v_projects.project_key is 'The project: normalized git remote, else working directory, else unknown-project.';
comment on column v_projects.sessions is 'Sessions of the project.';
comment on column v_projects.formats is 'How many formats (codex, claude, pi) its sessions come in.';
comment on column v_projects.items is 'Conversation items of its sessions.';
comment on column v_projects.first_active_at is 'Oldest session update.';
comment on column v_projects.last_active_at is 'Newest session update.';
comment on column v_projects.folder is 'Memory folder, relative to the output folder; null before consolidation.';
comment on column v_projects.memories is 'Memories in the last consolidation; 0 before any.';
comment on column v_projects.consolidation_status is 'running | succeeded | failed | empty; null before consolidation.';
comment on column v_projects.consolidated_at is 'When the folder was last written successfully.';
