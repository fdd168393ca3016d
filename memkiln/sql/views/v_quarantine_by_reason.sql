-- What could not be read, grouped by reason and file, and for every documented reason a
-- total row (path '(all files)'), so a clean archive shows each reason at 0.
create or replace view v_quarantine_by_reason as
with per_file as (
    select
        reason,
        path,
        count(*) as entries,
        sum(bytes) as bytes,
        min(line_no) as first_line,
        max(detected_at) as last_seen_at
    from quarantine
    group by reason, path
),
reasons(reason) as (
    values
        ('invalid_json'), ('not_an_object'), ('invalid_utf8'), ('truncated_line'),
        ('binary_file'), ('corrupt_compressed'), ('unreadable_file'),
        ('unrecognized_format'), ('duplicate_rollout'), ('line_too_long'),
        ('file_too_large'), ('too_many_bad_lines'), ('no_session'), ('bad_timestamp')
),
per_reason as (
    select
        reason,
        '(all files)' as path,
        coalesce(sum(f.entries), 0) as entries,
        coalesce(sum(f.bytes), 0) as bytes,
        min(f.first_line) as first_line,
        max(f.last_seen_at) as last_seen_at
    from (select reason from reasons union select reason from per_file) as r
    left join per_file as f using (reason)
    group by reason
),
all_rows as (  -- sorted outside: DuckDB 1.x sorts a union by its own columns only
    select * from per_file
    union all
    select * from per_reason
)
select * from all_rows
order by reason, path = '(all files)' desc, entries desc, path;
comment on view v_quarantine_by_reason is 'What could not be read, grouped by reason and file; each documented reason also has a total row, path (all files), at 0 when nothing was quarantined for it.';
comment on column v_quarantine_by_reason.reason is 'Fixed quarantine reason (invalid_json, truncated_line, ...).';
comment on column v_quarantine_by_reason.path is 'The file, redacted; (all files) for the reason''s total row.';
comment on column v_quarantine_by_reason.entries is 'Quarantine entries.';
comment on column v_quarantine_by_reason.bytes is 'Bytes quarantined.';
comment on column v_quarantine_by_reason.first_line is 'First quarantined line; null for a whole file or when none.';
comment on column v_quarantine_by_reason.last_seen_at is 'When it was last found; null when never.';
