-- An unchanged input keeps its output; only the watermark moves to the new version.
update stage1_outputs as o
set watermark = f.watermark
from finished as f
where f.rollout_id = o.rollout_id and f.outcome = 'reused';
