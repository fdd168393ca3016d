-- This run's counts per decision and reason (after record_decisions).
insert into selection_counts (run_id, decision, reason, sessions)
select run_id, decision, reason, count(*)
from selection_decisions
group by run_id, decision, reason;
