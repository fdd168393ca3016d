-- The history row of every attempt in a batch of outcomes.
insert into stage1_attempts (
    run_id, rollout_id, attempt, outcome, reason, detail, backend, model, input_tokens,
    output_tokens, cost_usd, started_at, ended_at
)
select
    $run_id, rollout_id, attempt, outcome, reason, detail, $backend, $model, input_tokens,
    output_tokens, cost_usd, started_at, $at
from finished;
