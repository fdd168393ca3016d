-- Every project with its sessions, activity and memory folder, most recently active first.
select
    project_key,
    sessions,
    items::bigint as items,
    first_active_at,
    last_active_at,
    coalesce(memories, 0) as memories,
    folder,
    consolidation_status,
    consolidated_at
from v_projects
order by last_active_at desc nulls last, project_key;
