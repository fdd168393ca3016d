-- The sessions of an uploaded batch (from batch_items).
insert into stage1_batch_items
select $file, rollout_id, input_hash, attempt, watermark
from batch_items
