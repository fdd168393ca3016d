-- Which of these files the store already knows.
select file_id from files where file_id = any($fids::bigint[])
