-- Mean output tokens of the model's earlier stage-one answers.
select avg(output_tokens)
from stage1_attempts
where model = $model and outcome in ('succeeded', 'succeeded_no_output') and output_tokens > 0
