-- Why each session was or was not taken by stage one: the latest decision of every session
-- (rewritten by each run that selects), and the count of each decision per run (kept).
create table if not exists selection_decisions (
    rollout_id  varchar not null,
    run_id      varchar not null,
    decision    varchar not null,   -- take | skip
    reason      varchar not null,   -- selected | subagent | source_not_selected | ...
    decided_at  timestamptz not null
);
comment on table selection_decisions is 'The latest stage-one selection decision of every session: whether the last run that selected took it, and the fixed reason why not (one row per session, rewritten by each run).';
comment on column selection_decisions.rollout_id is 'The session (rollouts.rollout_id).';
comment on column selection_decisions.run_id is 'The run that made this decision (runs.run_id).';
comment on column selection_decisions.decision is 'take (the run extracted it, or counted it in a dry run) or skip.';
comment on column selection_decisions.reason is 'selected when taken; else why not: subagent, source_not_selected, memory_disabled, no_user_message, too_old, outside_range, still_active, up_to_date, leased, retry_budget_exhausted, retry_later, over_run_limit.';
comment on column selection_decisions.decided_at is 'When the decision was made (UTC).';

create table if not exists selection_counts (
    run_id    varchar not null,
    decision  varchar not null,   -- take | skip
    reason    varchar not null,
    sessions  bigint not null
);
comment on table selection_counts is 'How many sessions each run that selected took or skipped, by reason: the history behind selection_decisions.';
comment on column selection_counts.run_id is 'The run that selected (runs.run_id).';
comment on column selection_counts.decision is 'take or skip.';
comment on column selection_counts.reason is 'selected, or the fixed reason of the skip (as in selection_decisions.reason).';
comment on column selection_counts.sessions is 'Sessions with this decision and reason in this run.';
