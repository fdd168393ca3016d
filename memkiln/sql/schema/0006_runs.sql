-- One row per memkiln command run, with its counts.
create table if not exists runs (
    run_id          varchar primary key,
    command         varchar not null,
    archive         varchar,
    started_at      timestamptz not null,
    ended_at        timestamptz,
    status          varchar not null,      -- running | succeeded | failed
    error           varchar,
    files_seen      bigint not null default 0,
    files_new       bigint not null default 0,
    files_changed   bigint not null default 0,
    files_skipped   bigint not null default 0,
    files_failed    bigint not null default 0,
    bytes_read      bigint not null default 0,
    rollouts        bigint not null default 0,
    items           bigint not null default 0,
    quarantined     bigint not null default 0
);
