-- What it cost: tokens and dollars per day, phase and model.
select
    day,
    phase,
    coalesce(model, '(per run)') as model,
    cast(sum(requests) as bigint) as requests,
    cast(sum(failed_requests) as bigint) as failed_requests,
    cast(sum(input_tokens) as bigint) as input_tokens,
    cast(sum(output_tokens) as bigint) as output_tokens,
    sum(cost_usd) as cost_usd
from v_costs
group by all
order by day, phase, model;
