-- Each line of a batch without the fields its item already holds as text (or parts), so the
-- item's payload_json stores them once. Paths come from transforms/normalize.payload_text_paths;
-- a line without one is returned as it is (not parsed again).
-- Input relation: batch_payloads(line, text_path, text_path2), rows returned in input order.
select
    case
        when text_path is null then line
        when text_path2 is null then json_remove(line, text_path)::varchar
        else json_remove(json_remove(line, text_path), text_path2)::varchar
    end as line
from batch_payloads;
