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
comment on view v_extraction_outcomes is 'Stage-one outcomes per run, backend, model and reason: what happened to extraction.';
comment on column v_extraction_outcomes.run_id is 'The run (runs.run_id).';
comment on column v_extraction_outcomes.backend is 'Backend asked.';
comment on column v_extraction_outcomes.model is 'Model asked.';
comment on column v_extraction_outcomes.outcome is 'succeeded | succeeded_no_output | failed | reused.';
comment on column v_extraction_outcomes.reason is 'Failure reason; empty for other outcomes.';
comment on column v_extraction_outcomes.attempts is 'Attempts with this outcome.';
comment on column v_extraction_outcomes.input_tokens is 'Input tokens of those attempts.';
comment on column v_extraction_outcomes.output_tokens is 'Output tokens of those attempts.';
comment on column v_extraction_outcomes.cost_usd is 'Cost of those attempts in US dollars.';
