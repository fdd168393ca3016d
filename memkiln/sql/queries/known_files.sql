-- The files the store knows, with the fingerprint they had when read.
select file_id, path_key as path, size, mtime_ns, status
from files
