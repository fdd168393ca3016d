-- Runs, newest first, with their phases grouped: the phases of one `memkiln run` share
-- `group_id` (the run's own id, also their `parent_run_id`), and the run's row lists them in
-- `phases`. `flow_run_id` is the Prefect flow run.
create or replace view v_runs as
with phase_lists as (
    select
        parent_run_id as run_id,
        string_agg(command || ':' || status, ', ' order by started_at) as phases,
        count(*) filter (where status <> 'succeeded') as phases_not_succeeded
    from runs
    where parent_run_id is not null
    group by parent_run_id
)
select
    r.run_id,
    r.parent_run_id,
    coalesce(r.parent_run_id, r.run_id) as group_id,
    r.parent_run_id is not null as is_phase,
    r.command,
    r.status,
    p.phases,
    p.phases_not_succeeded,
    r.started_at,
    r.ended_at,
    date_diff('millisecond', r.started_at, r.ended_at) / 1000.0 as seconds,
    r.flow_run_id,
    r.pid,
    r.files_seen,
    r.files_new,
    r.files_changed,
    r.files_skipped,
    r.files_failed,
    r.bytes_read,
    r.rollouts,
    r.items,
    r.quarantined,
    r.secrets_redacted,
    r.sessions_considered,
    r.sessions_succeeded,
    r.sessions_no_output,
    r.sessions_failed,
    r.sessions_reused,
    r.model_requests,
    r.input_tokens,
    r.output_tokens,
    r.cost_usd,
    r.projects,
    r.projects_written,
    r.projects_skipped,
    r.projects_failed,
    r.files_written,
    r.files_removed,
    r.error
from runs as r
left join phase_lists as p using (run_id)
order by r.started_at desc;
comment on view v_runs is 'Runs, newest first, with their phases grouped: a `memkiln run` and its phases share group_id, and its row lists them in phases.';
comment on column v_runs.run_id is 'Run id.';
comment on column v_runs.parent_run_id is 'The `memkiln run` this row is a phase of; null for a run or a standalone command.';
comment on column v_runs.group_id is 'The run a row belongs to: its parent for a phase, else itself. Group by it to see a `memkiln run` with its phases.';
comment on column v_runs.is_phase is 'True for a phase (ingest, extract, consolidate) of a `memkiln run`.';
comment on column v_runs.command is 'ingest | extract | consolidate | run.';
comment on column v_runs.status is 'running | succeeded | failed | interrupted | abandoned.';
comment on column v_runs.phases is 'For a `memkiln run`: its phases in order, as command:status; null otherwise.';
comment on column v_runs.phases_not_succeeded is 'For a `memkiln run`: phases that did not succeed; null otherwise.';
comment on column v_runs.started_at is 'When it started (UTC).';
comment on column v_runs.ended_at is 'When it ended; null while running.';
comment on column v_runs.seconds is 'Duration in seconds; null while running.';
comment on column v_runs.flow_run_id is 'The Prefect flow run; null with --no-prefect.';
comment on column v_runs.pid is 'Process id.';
comment on column v_runs.files_seen is 'Files discovered.';
comment on column v_runs.files_new is 'Files read for the first time.';
comment on column v_runs.files_changed is 'Files read again because they changed.';
comment on column v_runs.files_skipped is 'Files left alone.';
comment on column v_runs.files_failed is 'Files that could not be read.';
comment on column v_runs.bytes_read is 'Decompressed bytes read.';
comment on column v_runs.rollouts is 'Sessions stored.';
comment on column v_runs.items is 'Items stored.';
comment on column v_runs.quarantined is 'Quarantine entries written.';
comment on column v_runs.secrets_redacted is 'Secrets replaced.';
comment on column v_runs.sessions_considered is 'Sessions stage one looked at.';
comment on column v_runs.sessions_succeeded is 'Sessions extracted with a memory.';
comment on column v_runs.sessions_no_output is 'Sessions with nothing durable.';
comment on column v_runs.sessions_failed is 'Sessions whose extraction failed.';
comment on column v_runs.sessions_reused is 'Sessions whose stored output was reused.';
comment on column v_runs.model_requests is 'Requests sent to the model.';
comment on column v_runs.input_tokens is 'Model input tokens.';
comment on column v_runs.output_tokens is 'Model output tokens.';
comment on column v_runs.cost_usd is 'Model cost in US dollars.';
comment on column v_runs.projects is 'Projects phase 2 looked at.';
comment on column v_runs.projects_written is 'Projects whose folder was written.';
comment on column v_runs.projects_skipped is 'Projects skipped (unchanged).';
comment on column v_runs.projects_failed is 'Projects that failed.';
comment on column v_runs.files_written is 'Memory files written.';
comment on column v_runs.files_removed is 'Memory files removed.';
comment on column v_runs.error is 'Why it failed or stopped, redacted.';
