-- Input memkiln could not read, with a fixed reason and a short redacted excerpt.
create table if not exists quarantine (
    run_id       varchar not null,
    file_id      bigint not null,
    path         varchar not null,
    line_no      integer,                  -- null when the whole file is quarantined
    reason       varchar not null,         -- invalid_json | not_an_object | invalid_utf8 | truncated_line | binary_file | corrupt_compressed | unrecognized_format | duplicate_rollout
    detail       varchar,
    excerpt      varchar,
    bytes        bigint not null,
    detected_at  timestamptz not null
);
