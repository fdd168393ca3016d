-- What `memkiln publish` placed where each agent loads memory (memkiln/io/publish.py): one
-- row per agent and file, rewritten by each publish that looks at it.
create table if not exists publications (
    target              varchar not null,   -- claude | omp | codex
    path                varchar not null,   -- the file, redacted
    project_key         varchar,            -- null for Codex's one global summary
    kind                varchar not null,   -- file | block
    status              varchar not null,   -- published | removed | skipped
    action              varchar not null,   -- create | change | keep | remove | skip
    reason              varchar,
    bytes               bigint,
    first_published_at  timestamptz,
    changed_at          timestamptz,
    checked_at          timestamptz not null,
    run_id              varchar,
    primary key (target, path)
);
comment on table publications is 'What memkiln publish placed where each agent loads memory (Claude Code, Oh My Pi, Codex): one row per agent and file, updated by each publish or --remove that looks at it.';
comment on column publications.target is 'The agent: claude (Claude Code auto memory) | omp (Oh My Pi) | codex (Codex''s global memory).';
comment on column publications.path is 'The file written, redacted; (target, path) is unique.';
comment on column publications.project_key is 'The project whose memory it holds; null for Codex''s one global summary.';
comment on column publications.kind is 'file (a file memkiln owns, marked on its last line) | block (memkiln''s marked block in a file it does not own, such as Claude Code''s MEMORY.md).';
comment on column publications.status is 'published | removed (by --remove) | skipped (left alone; see reason).';
comment on column publications.action is 'What the last publish did: create | change | keep (bytes unchanged, not touched) | remove | skip.';
comment on column publications.reason is 'Why a file was left alone (not written by memkiln, edited since, a symbolic link, no room in what the agent loads); null otherwise.';
comment on column publications.bytes is 'Size of the file after the last publish; 0 once removed or skipped.';
comment on column publications.first_published_at is 'When memkiln first wrote it; null if it never did.';
comment on column publications.changed_at is 'When memkiln last changed (or removed) it.';
comment on column publications.checked_at is 'When a publish last looked at it.';
comment on column publications.run_id is 'The publish run (runs.run_id) that last looked at it.';
