-- Insert the normalized items of a batch (b_items); their earlier rows were deleted by file.
insert into items by name
select
    rollout_id,
    seq,
    fid as file_id,
    line_no,
    part_idx,
    ts,
    record_type,
    item_type,
    role,
    name,
    call_id,
    text,
    parts,
    payload_json,
    omitted_bytes,
    provenance
from b_items;
