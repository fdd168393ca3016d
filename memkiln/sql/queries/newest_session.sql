-- When the most recently updated session was last updated.
select max(updated_at) from rollouts
