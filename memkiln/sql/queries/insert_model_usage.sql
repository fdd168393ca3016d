-- One run's requests, tokens and cost for one phase and model (spent, or a dry run's estimate).
insert into model_usage (
    run_id, kind, phase, backend, model, requests, input_tokens, output_tokens, cost_usd
)
values (
    $run_id, $kind, $phase, $backend, $model, $requests, $input_tokens, $output_tokens,
    $cost_usd
);
