-- Run records a scheduler and a notebook can rely on: the Prefect flow run, the parent run
-- that groups the phases of one `memkiln run`, the process, and counters for every phase.
-- status: running | succeeded | failed | interrupted (SIGTERM/SIGINT) | abandoned (its
-- process died; closed by the next run).
alter table runs add column parent_run_id varchar;
alter table runs add column flow_run_id varchar;
alter table runs add column pid integer;
alter table runs add column secrets_redacted bigint not null default 0;
alter table runs add column sessions_considered bigint not null default 0;
alter table runs add column sessions_succeeded bigint not null default 0;
alter table runs add column sessions_no_output bigint not null default 0;
alter table runs add column sessions_failed bigint not null default 0;
alter table runs add column sessions_reused bigint not null default 0;
alter table runs add column model_requests bigint not null default 0;
alter table runs add column input_tokens bigint not null default 0;
alter table runs add column output_tokens bigint not null default 0;
alter table runs add column cost_usd double not null default 0;
alter table runs add column projects bigint not null default 0;
alter table runs add column projects_written bigint not null default 0;
alter table runs add column projects_skipped bigint not null default 0;
alter table runs add column projects_failed bigint not null default 0;
alter table runs add column files_written bigint not null default 0;
alter table runs add column files_removed bigint not null default 0;
