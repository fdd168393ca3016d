-- The storage format of the store's file, such as 'v1.4.0+' (see memkiln.io.snapshot).
select tags['storage_version'] as storage_version
from duckdb_databases()
where database_name = $name
