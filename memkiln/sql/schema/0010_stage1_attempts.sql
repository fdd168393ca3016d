-- Every stage-one attempt and how it ended: the history behind stage1_jobs.
create table if not exists stage1_attempts (
    run_id          varchar not null,
    rollout_id      varchar not null,
    attempt         integer not null,
    outcome         varchar not null,     -- succeeded | succeeded_no_output | failed | reused
    reason          varchar,              -- rate_limited | timeout | server_error | bad_request | invalid_json | schema_mismatch | context_overflow | ...
    detail          varchar,
    backend         varchar not null,
    model           varchar not null,
    input_tokens    bigint not null default 0,
    output_tokens   bigint not null default 0,
    cost_usd        double not null default 0,
    started_at      timestamptz not null,
    ended_at        timestamptz not null
);
