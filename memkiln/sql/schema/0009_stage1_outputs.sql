-- The current stage-one output per rollout (redacted), with what produced it.
create table if not exists stage1_outputs (
    rollout_id       varchar primary key,
    raw_memory       varchar not null,
    rollout_summary  varchar not null,
    rollout_slug     varchar,
    watermark        timestamptz,          -- rollouts.updated_at of the version extracted
    backend          varchar not null,
    model            varchar not null,
    prompt_version   varchar not null,
    input_hash       varchar not null,
    input_tokens     bigint not null,
    output_tokens    bigint not null,
    cost_usd         double not null,
    run_id           varchar not null,
    created_at       timestamptz not null
);
