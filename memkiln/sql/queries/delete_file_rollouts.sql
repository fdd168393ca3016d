-- The sessions of these files (a batch replaces them).
delete from rollouts where file_id = any($fids::bigint[])
