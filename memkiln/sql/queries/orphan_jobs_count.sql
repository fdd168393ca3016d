-- Stage-one jobs held by runs other than $run_id (gone, or still running elsewhere); jobs
-- held by a batch of the Batch API (owner 'batch:…') are not orphans.
select count(*)
from stage1_jobs
where status = 'running' and owner <> $run_id and owner not like 'batch:%'
