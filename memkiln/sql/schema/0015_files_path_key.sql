-- A file is recognised by a key of its real path (sha256, hex), not by the path as stored: a
-- stored path is redacted (a folder named `token=ghp_…` must not reach the database), and two
-- real paths may redact to the same text. The table is rebuilt because DuckDB cannot drop the
-- unique constraint that `path` had.
create table files_v2 (
    file_id         bigint primary key,
    path_key        varchar not null unique,  -- sha256 (hex) of the real path's UTF-8 bytes
    path            varchar not null,         -- the path, redacted
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
insert into files_v2
select
    file_id, sha256(path), path, format, compression, size, mtime_ns, content_hash, status,
    rollout_id, lines, quarantined, first_seen_at, last_ingest_at, last_run_id
from files;
drop table files;
alter table files_v2 rename to files;
