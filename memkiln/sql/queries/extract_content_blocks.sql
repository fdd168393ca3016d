-- Explode message content arrays into one row per block, with the fields every block kind uses.
-- Input relation: batch_content(fid, line_no, content) where content is a JSON array (text).
with blocks as (
    select
        fid,
        line_no,
        unnest(json_extract(content, '$[*]')) as block,
        unnest(range(json_array_length(content)::bigint)) as part_idx
    from batch_content
),
fields as (
    select
        fid,
        line_no,
        part_idx,
        json_extract_string(block, [
            '$.type', '$.text', '$.thinking', '$.name', '$.id', '$.input', '$.arguments',
            '$.tool_use_id', '$.content', '$.is_error'
        ]) as f,
        json_type(block) as block_kind,
        block::varchar as b_json,
        block
    from blocks
)
select
    fid,
    line_no,
    part_idx::integer as part_idx,
    case when block_kind = 'VARCHAR' then 'text' else f[1] end as b_type,
    case when block_kind = 'VARCHAR' then block ->> '$' else f[2] end as b_text,
    f[3] as b_thinking,
    f[4] as b_name,
    f[5] as b_id,
    f[6] as b_input,
    f[7] as b_arguments,
    f[8] as b_tool_use_id,
    case
        when json_type(block, '$.content') = 'ARRAY'
            then array_to_string(json_extract_string(block, '$.content[*].text'), chr(10))
        else f[9]
    end as b_content,
    f[10] as b_is_error,
    b_json
from fields;
