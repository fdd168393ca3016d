-- A file that is gone, whose session another file now holds (its items and rollout are
-- deleted first): it stays recorded, as moved.
update files
set status = 'moved', rollout_id = null, last_ingest_at = $at, last_run_id = $run_id
where file_id = any($fids::bigint[]);
