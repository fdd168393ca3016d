-- One row per discovered rollout file: its fingerprint decides whether it is read again.
create table if not exists files (
    file_id         bigint primary key,
    path            varchar not null unique,
    format          varchar,            -- codex | claude | pi | null when unrecognized
    compression     varchar not null,   -- none | gzip | zstd
    size            bigint not null,
    mtime_ns        bigint not null,
    content_hash    varchar,            -- sha256 (hex) of the decompressed bytes
    status          varchar not null,   -- ok | partial | empty | unreadable | binary | corrupt | unrecognized | duplicate | moved
    rollout_id      varchar,
    lines           bigint not null default 0,
    quarantined     bigint not null default 0,
    first_seen_at   timestamptz not null,
    last_ingest_at  timestamptz not null,
    last_run_id     varchar not null
);
