-- One project's consolidation outcome (memkiln.pipeline.consolidate_steps.record_project).
insert or replace into consolidation_jobs (project_key, folder, status, owner,
    input_hash, selected_ids, backend, model, memories, files_written, files_removed,
    last_success_at, last_reason, last_error, updated_at)
values ($key, $folder, $status, null, $hash, $ids, $backend, $model, $memories,
    $written, $removed, $success_at, $reason, $error, $at)
