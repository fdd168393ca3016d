-- Secrets one rule redacted at ingest in this run, added to its count.
insert into redaction_hits (run_id, stage, rule_id, hits)
values ($run_id, 'ingest', $rule_id, $hits)
on conflict do update set hits = redaction_hits.hits + excluded.hits
