-- Replace every session's latest selection decision by this run's (from the frame
-- `decided`: rollout_id, decision).
delete from selection_decisions;
insert into selection_decisions (rollout_id, run_id, decision, reason, decided_at)
select
    rollout_id,
    $run_id,
    case when decision = 'take' then 'take' else 'skip' end,
    case when decision = 'take' then 'selected' else decision end,
    $at
from decided;
