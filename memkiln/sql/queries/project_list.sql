-- Every project as v_projects holds it (the one source of memkiln projects and the view),
-- most recently active first.
select * from v_projects
order by last_active_at desc nulls last, project_key;
