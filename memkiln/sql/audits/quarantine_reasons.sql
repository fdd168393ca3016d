-- Audit: quarantine reasons are the documented fixed strings. Must return zero rows.
select reason, count(*) as entries
from quarantine
where reason not in (
    'invalid_json', 'not_an_object', 'invalid_utf8', 'truncated_line', 'binary_file',
    'corrupt_compressed', 'unreadable_file', 'unrecognized_format', 'duplicate_rollout',
    'line_too_long', 'file_too_large', 'too_many_bad_lines', 'no_session', 'bad_timestamp'
)
group by reason;
