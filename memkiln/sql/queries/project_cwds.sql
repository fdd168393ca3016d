-- The working directories each project's sessions ran in (to find a project by its cwd).
select distinct project_key, cwd
from rollouts
where project_key is not null and cwd is not null;
