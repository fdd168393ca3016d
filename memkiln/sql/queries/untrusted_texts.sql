-- The texts of a project's selected sessions that the user did not type (tool output,
-- fetched pages, file reads, injected and agent text), and the ones the user typed: what the
-- copied-instruction filter (memkiln/transforms/trust.py) compares memory lines against.
select
    coalesce(provenance, 'user') = 'user' and role = 'user' as typed,
    text
from items
where rollout_id = any($ids)
    and record_type = 'response_item'
    and text is not null
    and item_type in ('message', 'function_call_output', 'custom_tool_call_output', 'tool_search_output')
