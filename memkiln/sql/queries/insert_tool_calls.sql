-- Insert the tool calls of a batch (b_tool_calls); their earlier rows were deleted by file.
insert into tool_calls by name
select
    rollout_id,
    seq,
    file_id,
    call_id,
    tool,
    command,
    started_at,
    ended_at,
    duration_ms,
    exit_code,
    is_error,
    failed,
    has_output,
    output_chars,
    error_line
from b_tool_calls;
