-- Secrets replaced per rule, stage and day (UTC, of the run that found them), and for every
-- day with an ingest a total row (rule_id '(all rules)'), so a day without a secret shows 0.
create or replace view v_redactions as
with per_rule as (
    select
        cast(timezone('UTC', r.started_at) as date) as day,
        h.stage,
        h.rule_id,
        cast(sum(h.hits) as bigint) as hits,
        count(distinct h.run_id) as runs
    from redaction_hits as h
    join runs as r using (run_id)
    group by all
),
per_day as (
    select
        cast(timezone('UTC', started_at) as date) as day,
        'ingest' as stage,
        '(all rules)' as rule_id,
        cast(sum(secrets_redacted) as bigint) as hits,
        count(*) as runs
    from runs
    where command = 'ingest'
    group by all
),
all_rows as (  -- sorted outside: DuckDB 1.x sorts a union by its own columns only
    select * from per_rule
    union all
    select * from per_day
)
select * from all_rows
order by day, stage, rule_id = '(all rules)' desc, hits desc, rule_id;
comment on view v_redactions is 'Secrets replaced by [REDACTED_SECRET], per rule, stage and day (UTC); each day with an ingest also has a total row, rule_id (all rules).';
comment on column v_redactions.day is 'Day (UTC) the runs started.';
comment on column v_redactions.stage is 'ingest | render | extract | consolidate.';
comment on column v_redactions.rule_id is 'The rule that matched (memkiln/transforms/secret_rules.toml), or (all rules) for the day''s ingest total.';
comment on column v_redactions.hits is 'Secrets replaced.';
comment on column v_redactions.runs is 'Runs that replaced them (for the total: ingest runs that day).';
