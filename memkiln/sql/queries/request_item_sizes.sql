-- Each session's items a model may be shown (the item filter's first step: kept record
-- types and item types, not a developer or system message), sized as the stage-one budget
-- sizes them (characters of text plus $overhead per item): at least what the kept items
-- hold, so a session under a bound here is under it once filtered. Decides which sessions
-- are read in pieces (memkiln.io.session_items).
select rollout_id, sum(coalesce(length(text), 0) + $overhead)::bigint as chars
from items
where rollout_id = any($ids)
    and record_type = any($record_types)
    and item_type = any($item_types)
    and not (item_type = 'message' and coalesce(role = any($dropped_roles), false))
group by rollout_id
