-- Stage-one outcomes per run, backend and reason: what happened to extraction.
create or replace view v_extraction_outcomes as
select
    run_id,
    backend,
    model,
    outcome,
    coalesce(reason, '') as reason,
    count(*) as attempts,
    sum(input_tokens) as input_tokens,
    sum(output_tokens) as output_tokens,
    sum(cost_usd) as cost_usd
from stage1_attempts
group by all;
