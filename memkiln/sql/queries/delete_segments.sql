-- Forget the stored segments of the sessions about to be segmented again.
delete from segments where rollout_id = any($ids);
