-- One row per normalized item (a Codex line, or one content block of a Claude Code / Pi message).
-- Every text column is redacted before it is written here.
create table if not exists items (
    rollout_id     varchar not null,
    seq            integer not null,         -- order within the rollout
    file_id        bigint not null,
    line_no        integer not null,         -- 1-based line in the (decompressed) file
    part_idx       integer not null,         -- content block within the line, 0 when the line is the item
    ts             timestamptz,
    record_type    varchar not null,         -- response_item | event_msg | session_meta | turn_context | ...
    item_type      varchar,                  -- message | function_call | function_call_output | reasoning | ...
    role           varchar,                  -- user | assistant | developer | system | tool
    name           varchar,                  -- tool name for calls
    call_id        varchar,
    text           varchar,                  -- the item's readable text, redacted
    parts          struct(type varchar, text varchar)[],  -- message content parts, redacted
    payload_json   varchar,                  -- the line's compact JSON, redacted, blobs replaced by size notes
    omitted_bytes  integer not null default 0
    -- no primary key: (rollout_id, seq) is unique by construction (a file's rows are replaced
    -- as a whole) and checked by sql/audits/items_unique.sql; an index here would be
    -- rewritten at every checkpoint and dominate the cost of a large ingest
);
