-- Tool calls per project and tool: how many ran, how many failed, and a typical error.
select
    coalesce(project_key, 'unknown-project') as project_key,
    tool,
    count(*) as calls,
    count(*) filter (where failed) as failed,
    round(count(*) filter (where failed) / count(*), 3) as failed_share,
    round(median(duration_ms)) as median_ms,
    max(error_line) filter (where failed) as example_error
from v_tool_calls
group by all
order by failed desc, calls desc, project_key, tool;
