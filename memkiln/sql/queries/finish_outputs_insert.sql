-- The new outputs of a batch of outcomes.
insert into stage1_outputs (
    rollout_id, raw_memory, rollout_summary, rollout_slug, watermark, backend, model,
    prompt_version, input_hash, input_tokens, output_tokens, cost_usd, run_id, created_at
)
select
    rollout_id, raw_memory, rollout_summary, rollout_slug, watermark, $backend, $model,
    $pv, input_hash, input_tokens, output_tokens, cost_usd, $run_id, $at
from finished
where outcome = 'succeeded';
