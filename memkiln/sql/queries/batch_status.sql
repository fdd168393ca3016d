-- A batch's state as the Batch API reports it.
update stage1_batches
set status = $status, output_file_id = $output_file, error_file_id = $error_file, updated_at = $at
where input_file_id = $file
