-- One phase-2 job per project: what it was built from, so unchanged projects are skipped.
create table if not exists consolidation_jobs (
    project_key      varchar primary key,
    folder           varchar not null,
    status           varchar not null,   -- running | succeeded | failed | empty
    owner            varchar,
    input_hash       varchar,            -- of the selected memories, backend, model and prompt
    selected_ids     varchar[],          -- rollout ids of the last successful consolidation
    backend          varchar,
    model            varchar,
    memories         integer not null default 0,
    files_written    integer not null default 0,
    files_removed    integer not null default 0,
    last_success_at  timestamptz,
    last_reason      varchar,
    last_error       varchar,
    updated_at       timestamptz not null
);
