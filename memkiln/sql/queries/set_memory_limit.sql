-- The memory DuckDB may use before it writes a large transaction's rows out.
set memory_limit = $limit
