-- The agents' tool calls per kind of tool, named alike across formats (v_tool_calls.tool_kind:
-- `bash`, `Bash` and `shell` are one): how many ran, how many failed, the names merged, and a
-- typical error.
select
    tool_kind,
    count(*) as calls,
    count(*) filter (where failed) as failed,
    round(count(*) filter (where failed) / count(*), 3) as failed_share,
    count(distinct project_key) as projects,
    string_agg(distinct tool, ', ' order by tool) as tool_names,
    max(error_line) filter (where failed) as example_error
from v_tool_calls
group by tool_kind
order by failed desc, calls desc, tool_kind;
