-- (column, type, comment) of a table or view, in column order.
select column_name, data_type, comment
from duckdb_columns()
where schema_name = 'main' and table_name = $name
order by column_index
