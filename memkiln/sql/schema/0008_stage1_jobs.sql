-- One stage-one extraction job per rollout: its state, lease, retry budget and watermarks.
create table if not exists stage1_jobs (
    rollout_id        varchar primary key,
    status            varchar not null,   -- pending | running | succeeded | succeeded_no_output | failed
    owner             varchar,            -- run id holding the lease
    lease_until       timestamptz,
    attempts          integer not null default 0,   -- attempts for this version of the rollout
    source_watermark  timestamptz,        -- rollouts.updated_at of the version being extracted
    done_watermark    timestamptz,        -- rollouts.updated_at of the version last finished
    retry_at          timestamptz,        -- a failed job is not retried before this time
    last_reason       varchar,            -- fixed reason string of the last failure
    last_error        varchar,            -- redacted detail of the last failure
    updated_at        timestamptz not null
);
