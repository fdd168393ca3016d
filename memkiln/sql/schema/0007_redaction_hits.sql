-- Secrets found per rule per run (counted before they were replaced).
create table if not exists redaction_hits (
    run_id   varchar not null,
    stage    varchar not null,   -- ingest | render | extract | consolidate
    rule_id  varchar not null,
    hits     bigint not null,
    primary key (run_id, stage, rule_id)
);
