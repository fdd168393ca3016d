-- Mean output tokens of the model's earlier stage-one answers under a prompt version (the
-- attempts of runs whose outputs carry it), and how many answers that is.
select avg(output_tokens), count(*)
from stage1_attempts
where model = $model and outcome in ('succeeded', 'succeeded_no_output') and output_tokens > 0
  and run_id in (
      select run_id from stage1_outputs where model = $model and prompt_version = $prompt_version
  )
