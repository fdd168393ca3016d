-- A batch was created from an uploaded file.
update stage1_batches
set batch_id = $batch_id, status = $status, updated_at = $at
where input_file_id = $file
