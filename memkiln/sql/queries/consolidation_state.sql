-- Each project's last consolidation: what it wrote and from which inputs.
select project_key, folder, status, input_hash, selected_ids
from consolidation_jobs
