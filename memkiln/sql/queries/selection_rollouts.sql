-- The rollouts columns candidate selection reads (transforms/selection.ROLLOUT_COLUMNS).
select
    rollout_id,
    format,
    source,
    originator,
    is_subagent,
    memory_mode,
    n_user_messages,
    started_at,
    updated_at
from rollouts
