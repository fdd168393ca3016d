-- The items of a chunk's sessions, for filtering and rendering (the raw payload is not read),
-- each tool call with its structured result from tool_calls (every format's error flag and
-- exit line, read at ingest): call_failed and call_exit_code, null for other items.
select
    i.* exclude (payload_json),
    t.failed as call_failed,
    t.exit_code as call_exit_code,
    t.has_output as call_has_output
from items as i
left join tool_calls as t
    on t.rollout_id = i.rollout_id and t.seq = i.seq
where i.rollout_id = any($ids)
order by i.rollout_id, i.seq
