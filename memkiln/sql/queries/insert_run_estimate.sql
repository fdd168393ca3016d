-- What a dry run found and estimated.
insert into run_estimates (
    run_id, sessions_found, sessions_eligible, sessions_done, sessions_to_do, projects_to_do,
    input_tokens, output_tokens, cost_usd, created_at
)
values (
    $run_id, $found, $eligible, $done, $to_do, $projects, $input_tokens, $output_tokens,
    $cost_usd, $at
);
