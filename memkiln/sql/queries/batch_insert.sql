-- A batch whose input file was uploaded.
insert into stage1_batches (
    input_file_id, run_id, model, status, requests, created_at, updated_at
)
values ($file, $run_id, $model, 'uploaded', $n, $at, $at)
