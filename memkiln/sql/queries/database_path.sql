-- The file behind an attached database.
select path from duckdb_databases() where database_name = $name
