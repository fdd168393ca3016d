-- A schema file was applied.
insert into schema_migrations (version, name) values ($version, $name)
