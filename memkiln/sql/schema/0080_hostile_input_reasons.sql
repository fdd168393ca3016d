-- Reasons and statuses of hostile input: lines and files over the reading limits, sessions
-- without a usable time, files of a known format without a session id.
comment on column quarantine.reason is 'invalid_json | not_an_object | invalid_utf8 | truncated_line | line_too_long (longer than the line limit; its length in bytes) | binary_file | corrupt_compressed | file_too_large (past the per-file limit of decompressed lines) | unreadable_file | unrecognized_format | no_session (lines of a known format, no session id) | bad_timestamp (a session whose times are missing, out of range, in the future or without a zone) | duplicate_rollout.';
comment on column files.status is 'ok | partial (some lines quarantined) | empty | unreadable | binary | corrupt | unrecognized | no_session | bad_timestamp | duplicate | moved.';
comment on column runs.files_failed is 'Files that could not be read (unreadable, corrupt, binary, unrecognized, no_session, bad_timestamp).';
