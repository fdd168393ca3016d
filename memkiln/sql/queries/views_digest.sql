-- The digest of the view files the views were last created from, when every view named in
-- $names still exists (no row: create them).
select digest
from schema_views
where (
    select count(*)
    from duckdb_views()
    where schema_name = 'main' and not internal and view_name in (select unnest($names))
) = len($names)
