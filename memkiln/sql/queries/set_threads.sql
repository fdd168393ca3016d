-- The threads DuckDB may use for this connection's queries (its own database instance).
set threads = $threads
