-- A dry run's projects_to_do counts the projects with sessions to extract: each may get new
-- memories, but a session that ends with nothing durable adds none, so the run that follows
-- may consolidate fewer (the dry run said 47, the run consolidated 44). Say so.
comment on column run_estimates.projects_to_do is 'Projects with sessions the run would extract: each may get new memories and be consolidated by phase 2 (a session that ends with nothing durable adds none, so fewer projects may be consolidated).';
