-- One file a publish looked at (memkiln.pipeline.publish.record_steps).
insert into publications as p (target, path, project_key, kind, status, action, reason,
    bytes, first_published_at, changed_at, checked_at, run_id)
values ($target, $path, $project, $kind, $status, $action, $reason, $bytes,
    case when $status = 'published' then $at end,
    case when $action in ('create', 'change', 'remove') then $at end,
    $at, $run_id)
on conflict (target, path) do update set
    project_key = coalesce(excluded.project_key, p.project_key),
    kind = excluded.kind,
    status = excluded.status,
    action = excluded.action,
    reason = excluded.reason,
    bytes = excluded.bytes,
    first_published_at = coalesce(p.first_published_at, excluded.first_published_at),
    changed_at = coalesce(excluded.changed_at, p.changed_at),
    checked_at = excluded.checked_at,
    run_id = excluded.run_id
