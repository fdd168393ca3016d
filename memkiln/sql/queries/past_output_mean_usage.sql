-- Mean output tokens per request of the model's earlier answers in a phase, and how many
-- requests that is.
select sum(output_tokens) / nullif(sum(requests), 0), coalesce(sum(requests), 0)
from model_usage
where kind = 'actual' and phase = $phase and model = $model and output_tokens > 0
