-- Row counts of the stage tables (for summaries and idempotency checks).
select
    (select count(*) from files) as files,
    (select count(*) from rollouts) as rollouts,
    (select count(*) from items) as items,
    (select count(*) from quarantine) as quarantine
