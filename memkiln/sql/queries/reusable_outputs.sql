-- (rollout_id, input_hash) already extracted with this prompt version and model.
select rollout_id, input_hash
from stage1_outputs
where prompt_version = $pv and model = $model
