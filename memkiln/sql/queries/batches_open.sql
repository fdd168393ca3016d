-- Batches whose outcomes are not applied yet.
select input_file_id, batch_id, status
from stage1_batches
where status <> 'applied'
