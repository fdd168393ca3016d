-- memkiln status: files published per agent and status, with the last change.
select target, status, count(*) as files, max(changed_at) as last_changed_at
from publications
group by target, status
order by target, status
