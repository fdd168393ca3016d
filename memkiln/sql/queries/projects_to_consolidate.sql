-- Projects that get new memories from the sessions the latest selection takes, with how
-- many (a dry run's phase-2 estimate).
select
    coalesce(r.project_key, 'unknown-project') as project_key,
    count(*) as new_memories
from selection_decisions as d
join rollouts as r using (rollout_id)
where d.decision = 'take'
group by all
order by project_key;
