-- Each tool call is stored once, and a session has as many as it counts: must return no row.
select r.rollout_id, r.n_tool_calls, count(t.seq) as stored, count(distinct t.seq) as distinct_calls
from rollouts as r
left join tool_calls as t using (rollout_id)
group by r.rollout_id, r.n_tool_calls
having count(t.seq) <> r.n_tool_calls or count(t.seq) <> count(distinct t.seq);
