-- What memkiln publish placed where, and whether it is behind the project's memory folder.
create or replace view v_publications as
select
    p.target,
    p.project_key,
    p.path,
    p.kind,
    p.status,
    p.action,
    p.reason,
    p.bytes,
    p.first_published_at,
    p.changed_at,
    p.checked_at,
    p.run_id,
    c.last_success_at as consolidated_at,
    p.status = 'published' and c.last_success_at is not null
        and c.last_success_at > p.checked_at as behind
from publications as p
left join consolidation_jobs as c using (project_key);
comment on view v_publications is 'What memkiln publish placed where each agent loads memory, when, and whether the project''s memory changed since.';
comment on column v_publications.target is 'claude | omp | codex.';
comment on column v_publications.project_key is 'The project; null for Codex''s global summary.';
comment on column v_publications.path is 'The file, redacted.';
comment on column v_publications.kind is 'file (memkiln''s own) | block (memkiln''s block in a file it does not own).';
comment on column v_publications.status is 'published | removed | skipped.';
comment on column v_publications.action is 'What the last publish did: create | change | keep | remove | skip.';
comment on column v_publications.reason is 'Why it was left alone; null otherwise.';
comment on column v_publications.bytes is 'Size after the last publish.';
comment on column v_publications.first_published_at is 'When memkiln first wrote it.';
comment on column v_publications.changed_at is 'When memkiln last changed or removed it.';
comment on column v_publications.checked_at is 'When a publish last looked at it.';
comment on column v_publications.run_id is 'The publish run that last looked at it.';
comment on column v_publications.consolidated_at is 'When the project''s memory folder was last written.';
comment on column v_publications.behind is 'True when the project''s memory folder was written after the last publish looked at this file: publish again.';
