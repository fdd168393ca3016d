-- One row per session, whatever agent wrote it.
create table if not exists rollouts (
    rollout_id          varchar primary key,
    file_id             bigint not null,
    path                varchar not null,
    format              varchar not null,
    source              varchar,          -- cli | vscode | exec | subagent | ...
    originator          varchar,
    cli_version         varchar,
    cwd                 varchar,
    project_key         varchar,          -- normalized git remote, else cwd
    git_repository_url  varchar,
    git_branch          varchar,
    git_commit          varchar,
    started_at          timestamptz,
    updated_at          timestamptz,
    memory_mode         varchar,
    parent_id           varchar,
    forked_from_id      varchar,
    is_subagent         boolean not null default false,
    n_lines             bigint not null,
    n_items             bigint not null,
    n_user_messages     bigint not null,
    n_tool_calls        bigint not null,
    n_quarantined       bigint not null,
    omitted_bytes       bigint not null,
    ingested_at         timestamptz not null,
    run_id              varchar not null
);
