-- One piece of a very large session: its items from seq $first to $last that a model may be
-- shown (as in request_item_sizes), with their tool calls' results, as request_items gives
-- them.
select
    i.* exclude (payload_json),
    t.failed as call_failed,
    t.exit_code as call_exit_code,
    t.has_output as call_has_output
from items as i
left join tool_calls as t
    on t.rollout_id = i.rollout_id and t.seq = i.seq
where i.rollout_id = $id
    and i.seq between $first and $last
    and i.record_type = any($record_types)
    and i.item_type = any($item_types)
    and not (i.item_type = 'message' and coalesce(i.role = any($dropped_roles), false))
order by i.seq
