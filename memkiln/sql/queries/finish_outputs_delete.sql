-- Outputs replaced (succeeded) or withdrawn (succeeded_no_output) by a batch of outcomes.
delete from stage1_outputs
where rollout_id in (
    select rollout_id from finished where outcome in ('succeeded', 'succeeded_no_output')
);
