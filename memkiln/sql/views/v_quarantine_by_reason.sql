-- What could not be read, grouped by reason and file.
create or replace view v_quarantine_by_reason as
select
    reason,
    path,
    count(*) as entries,
    sum(bytes) as bytes,
    min(line_no) as first_line,
    max(detected_at) as last_seen_at
from quarantine
group by reason, path;
comment on view v_quarantine_by_reason is 'What could not be read, grouped by reason and file.';
comment on column v_quarantine_by_reason.reason is 'Fixed quarantine reason (invalid_json, truncated_line, ...).';
comment on column v_quarantine_by_reason.path is 'The file, redacted.';
comment on column v_quarantine_by_reason.entries is 'Quarantine entries.';
comment on column v_quarantine_by_reason.bytes is 'Bytes quarantined.';
comment on column v_quarantine_by_reason.first_line is 'First quarantined line; null for a whole file.';
comment on column v_quarantine_by_reason.last_seen_at is 'When it was last found.';
