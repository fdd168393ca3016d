-- Record the files of a batch (b_files) with their fingerprint and outcome.
insert into files (
    file_id, path_key, path, format, compression, size, mtime_ns, content_hash, status, rollout_id,
    lines, quarantined, first_seen_at, last_ingest_at, last_run_id
)
select
    file_id, path_key, path, format, compression, size, mtime_ns, content_hash, status, rollout_id,
    lines, quarantined, $at, $at, $run_id
from b_files
on conflict (file_id) do update set
    path = excluded.path,
    format = excluded.format,
    compression = excluded.compression,
    size = excluded.size,
    mtime_ns = excluded.mtime_ns,
    content_hash = excluded.content_hash,
    status = excluded.status,
    rollout_id = excluded.rollout_id,
    lines = excluded.lines,
    quarantined = excluded.quarantined,
    last_ingest_at = excluded.last_ingest_at,
    last_run_id = excluded.last_run_id;
