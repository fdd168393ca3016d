-- The session of render-input's scratch store (memkiln.io.render_large): one file, read as
-- ingest reads it.
select rollout_id, format, cwd from rollouts
