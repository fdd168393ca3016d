-- Sessions with their project, for notebooks.
create or replace view v_rollouts as
select
    r.rollout_id,
    r.format,
    r.project_key,
    r.cwd,
    r.source,
    r.originator,
    r.started_at,
    r.updated_at,
    r.is_subagent,
    r.n_items,
    r.n_user_messages,
    r.n_tool_calls,
    r.n_quarantined,
    r.path
from rollouts as r;
