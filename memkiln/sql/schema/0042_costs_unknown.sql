-- A cost is null when the model's price is unknown (never a silent 0).
alter table runs alter column cost_usd drop not null;
alter table stage1_attempts alter column cost_usd drop not null;
alter table stage1_outputs alter column cost_usd drop not null;
