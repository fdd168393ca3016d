-- (kind, name, comment) of every table and view of the main schema, tables first.
select 'table', table_name, comment
from duckdb_tables()
where schema_name = 'main' and not internal and not temporary
union all
(
    select 'view', view_name, comment
    from duckdb_views()
    where schema_name = 'main' and not internal and not temporary
)
order by 1, 2
