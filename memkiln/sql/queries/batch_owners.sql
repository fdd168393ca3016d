-- The owners of the jobs held by batches of the Batch API not applied yet.
select $prefix || input_file_id
from stage1_batches
where status <> 'applied'
