-- Batches that ended and whose outcomes were recorded.
update stage1_batches
set status = 'applied', updated_at = $at
where status in ('completed', 'failed', 'expired', 'cancelled')
