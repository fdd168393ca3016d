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
