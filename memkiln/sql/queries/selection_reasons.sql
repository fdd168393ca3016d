-- How many sessions the latest selection took or skipped, by reason (for `memkiln status`).
select
    decision,
    reason,
    count(*) as sessions
from selection_decisions
group by decision, reason
order by sessions desc, reason;
