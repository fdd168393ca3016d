-- The schema files applied to this database.
select version from schema_migrations
