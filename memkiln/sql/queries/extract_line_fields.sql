-- Pull, from each line of a batch, the fields that the three rollout formats use, and whether
-- the line is valid JSON at all. The lines are not redacted yet: this runs on the in-memory
-- parser connection only, and what is built from the fields is redacted before it is stored.
-- Each line is parsed once: one json_extract_string call with every path (a second, small
-- parse only for has_payload, below). Objects and arrays come back as compact JSON text; a
-- path that is absent gives null. A line that is not valid JSON gives null for every field
-- (try: the parse fails) and valid = false; json_valid is asked only about those lines.
-- Input relation: batch_lines(fid, line_no, line), any lines (null for lines not UTF-8).
-- The ``…[0]`` paths tell an array (first element present) from a string of the same text.
with fields as (
    select
        fid,
        line_no,
        line,
        try(json_extract_string(line, [
            '$.type', '$.timestamp', '$.record_type', '$.id', '$.role', '$.name',          -- 1-6
            '$.call_id', '$.arguments', '$.input', '$.output', '$.content', '$.summary',   -- 7-12
            '$.action', '$.instructions', '$.git', '$.cwd', '$.version',                   -- 13-17
            '$.payload.type', '$.payload.role', '$.payload.name', '$.payload.call_id',     -- 18-21
            '$.payload.arguments', '$.payload.input', '$.payload.output',                  -- 22-24
            '$.payload.content', '$.payload.message', '$.payload.summary',                 -- 25-27
            '$.payload.action', '$.payload.id', '$.payload.session_id', '$.payload.cwd',   -- 28-31
            '$.payload.originator', '$.payload.cli_version', '$.payload.source',           -- 32-34
            '$.payload.git', '$.payload.memory_mode', '$.payload.forked_from_id',          -- 35-37
            '$.payload.parent_thread_id', '$.payload.timestamp',                           -- 38-39
            '$.sessionId', '$.gitBranch', '$.isSidechain', '$.agentId', '$.entrypoint',    -- 40-44
            '$.isMeta', '$.message.role', '$.message.content', '$.message.toolName',       -- 45-48
            '$.message.toolCallId', '$.message.command', '$.message.output',               -- 49-51
            '$.message.isError', '$.customType',                                           -- 52-53
            '$.content[0]', '$.payload.content[0]', '$.message.content[0]',                -- 54-56
            '$.isCompactSummary'                                                           -- 57
        ])) as f
    from batch_lines
)
select
    fid,
    line_no,
    f[1] as type,
    f[2] as timestamp,
    f[3] as record_type,
    f[4] as id,
    f[5] as role,
    f[6] as name,
    f[7] as call_id,
    f[8] as arguments,
    f[9] as input,
    f[10] as output,
    f[11] as content,
    f[12] as summary,
    f[13] as action,
    f[14] as instructions,
    f[15] as git,
    f[16] as cwd,
    f[17] as version,
    f[18] as p_type,
    f[19] as p_role,
    f[20] as p_name,
    f[21] as p_call_id,
    f[22] as p_arguments,
    f[23] as p_input,
    f[24] as p_output,
    f[25] as p_content,
    f[26] as p_message,
    f[27] as p_summary,
    f[28] as p_action,
    f[29] as p_id,
    f[30] as p_session_id,
    f[31] as p_cwd,
    f[32] as p_originator,
    f[33] as p_cli_version,
    f[34] as p_source,
    f[35] as p_git,
    f[36] as p_memory_mode,
    f[37] as p_forked_from_id,
    f[38] as p_parent_thread_id,
    f[39] as p_timestamp,
    f[40] as session_id,
    f[41] as git_branch,
    f[42] as is_sidechain,
    f[43] as agent_id,
    f[44] as entrypoint,
    f[45] as is_meta,
    f[46] as m_role,
    f[47] as m_content,
    f[48] as m_tool_name,
    f[49] as m_tool_call_id,
    f[50] as m_command,
    f[51] as m_output,
    f[52] as m_is_error,
    f[53] as custom_type,
    -- has a non-null payload: not extracted as a path (that would copy the whole payload as
    -- text, tool outputs included); a payload with a type is one, lines with a sessionId are
    -- Claude Code lines (never an envelope), the few others are asked
    case
        when f[18] is not null then true
        when f[40] is not null then false
        when f is null then false
        else coalesce(json_type(line, '$.payload') <> 'NULL', false)
    end as has_payload,
    f[54] as content0,
    f[55] as p_content0,
    f[56] as m_content0,
    f[57] as is_compact_summary,
    case when f is not null then true else coalesce(json_valid(line), false) end as valid
from fields;
