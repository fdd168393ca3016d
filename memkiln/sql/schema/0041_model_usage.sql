-- Tokens and cost per run, phase and model: what was spent (actual) and what a dry run
-- estimated (estimate). cost_usd is null when the model's price is unknown, never 0.
create table if not exists model_usage (
    run_id         varchar not null,
    kind           varchar not null,   -- actual | estimate
    phase          varchar not null,   -- extract | consolidate
    backend        varchar not null,
    model          varchar not null,
    requests       bigint not null,
    input_tokens   bigint not null,
    output_tokens  bigint not null,
    cost_usd       double              -- null: price unknown
);
comment on table model_usage is 'Model requests, tokens and cost per run, phase (extract = phase 1, consolidate = phase 2) and model: spent (kind actual) or estimated by a dry run (kind estimate).';
comment on column model_usage.run_id is 'The run (runs.run_id) of the phase.';
comment on column model_usage.kind is 'actual (what the requests used, as the server reported) or estimate (a dry run: counted with the tokenizer and budget of the real requests).';
comment on column model_usage.phase is 'extract (phase 1, stage-one per session) or consolidate (phase 2, per project).';
comment on column model_usage.backend is 'heuristic, openai, ...';
comment on column model_usage.model is 'The model name sent to the backend.';
comment on column model_usage.requests is 'Requests sent (actual) or that would be sent (estimate).';
comment on column model_usage.input_tokens is 'Input tokens of those requests.';
comment on column model_usage.output_tokens is 'Output tokens of those requests (an estimate from past answers for kind estimate).';
comment on column model_usage.cost_usd is 'Cost in USD at the price of genai-prices or the prices setting; null when the price of the model is unknown (never 0 for an unknown price).';

create table if not exists run_estimates (
    run_id             varchar not null,
    sessions_found     bigint not null,
    sessions_eligible  bigint not null,
    sessions_done      bigint not null,
    sessions_to_do     bigint not null,
    projects_to_do     bigint not null,
    input_tokens       bigint not null,
    output_tokens      bigint not null,
    cost_usd           double,           -- null: some model's price is unknown
    created_at         timestamptz not null
);
comment on table run_estimates is 'What a dry run (--dry-run) found before any model call: sessions found, eligible, already done and to do, and the estimated tokens and cost of doing them (per model in model_usage, kind estimate).';
comment on column run_estimates.run_id is 'The dry run (runs.run_id).';
comment on column run_estimates.sessions_found is 'Sessions in the store.';
comment on column run_estimates.sessions_eligible is 'Sessions the settings select for extraction (not a sub-agent, source selected, memory on, a user message, in the age window or date range, idle).';
comment on column run_estimates.sessions_done is 'Eligible sessions whose output is up to date.';
comment on column run_estimates.sessions_to_do is 'Sessions the run would extract (a backfill: every batch; run and extract: this run, within max_rollouts_per_run).';
comment on column run_estimates.projects_to_do is 'Projects phase 2 would consolidate with a model because they get new memories.';
comment on column run_estimates.input_tokens is 'Estimated input tokens of every request, phase 1 and 2.';
comment on column run_estimates.output_tokens is 'Estimated output tokens of every request, phase 1 and 2.';
comment on column run_estimates.cost_usd is 'Estimated cost in USD; null when a model''s price is unknown.';
comment on column run_estimates.created_at is 'When the estimate was made (UTC).';
