-- The projects a publish can place: consolidated into a memory folder, with the working
-- directories their sessions ran in, most recently active first.
select
    p.project_key,
    p.folder,
    p.last_active_at,
    coalesce(list(distinct r.cwd order by r.cwd) filter (where r.cwd is not null), []) as cwds
from v_projects as p
left join rollouts as r on coalesce(r.project_key, 'unknown-project') = p.project_key
where p.consolidation_status = 'succeeded' and p.folder is not null
group by p.project_key, p.folder, p.last_active_at
order by p.last_active_at desc nulls last, p.project_key
