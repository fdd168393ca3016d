-- The sessions of one batch.
select rollout_id, input_hash, attempt, watermark
from stage1_batch_items
where input_file_id = $file
