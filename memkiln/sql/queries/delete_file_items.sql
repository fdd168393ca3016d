-- The items of these files (a batch replaces them).
delete from items where file_id = any($fids::bigint[])
