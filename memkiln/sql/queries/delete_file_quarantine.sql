-- The quarantined lines of these files (their files are read again).
delete from quarantine where file_id = any($fids::bigint[])
