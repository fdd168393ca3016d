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
    -- the block without the field its item holds as text (stored once, in items.text); a
    -- block that is a bare string is all text
    case
        when block_kind = 'VARCHAR' then null
        when f[1] = 'text' and f[2] is not null then json_remove(block, '$.text')
        when f[1] in ('thinking', 'redacted_thinking') and f[3] is not null
            then json_remove(block, '$.thinking')
        when f[1] = 'tool_use' and f[6] is not null then json_remove(block, '$.input')
        when f[1] = 'toolCall' and f[7] is not null then json_remove(block, '$.arguments')
        when f[1] = 'tool_result' and json_type(block, '$.content') in ('VARCHAR', 'ARRAY')
            then json_remove(block, '$.content')
        else block
    end::varchar as b_json
from fields;
