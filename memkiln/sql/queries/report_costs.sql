-- What it cost: model requests, tokens and dollars per day, phase, backend and model, as the
-- run summaries count them (model_usage, kind actual; the day the run started, UTC).
select
    cast(timezone('UTC', r.started_at) as date) as day,
    u.phase,
    u.backend,
    u.model,
    cast(sum(u.requests) as bigint) as model_requests,
    cast(sum(u.input_tokens) as bigint) as input_tokens,
    cast(sum(u.output_tokens) as bigint) as output_tokens,
    sum(u.cost_usd) as cost_usd
from model_usage as u
join runs as r using (run_id)
where u.kind = 'actual'
group by all
order by day, u.phase, u.backend, u.model;
