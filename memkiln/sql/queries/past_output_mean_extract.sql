-- Mean output tokens per request of the model's earlier stage-one answers under a prompt
-- version (the attempts of runs whose outputs carry it; a session sent in chunks counts its
-- chunk and merge requests), and how many requests that is.
select
    sum(output_tokens) / nullif(sum(requests), 0),
    coalesce(sum(requests), 0)
from (
    select
        output_tokens,
        greatest(coalesce(chunk_requests, 0) + coalesce(merge_requests, 0), 1) as requests
    from stage1_attempts
    where model = $model and outcome in ('succeeded', 'succeeded_no_output')
      and output_tokens > 0
      and run_id in (
          select run_id from stage1_outputs
          where model = $model and prompt_version = $prompt_version
      )
)
