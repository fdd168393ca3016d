-- The tool calls of these files (a batch replaces them).
delete from tool_calls where file_id = any($fids::bigint[])
