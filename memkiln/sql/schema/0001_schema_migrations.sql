-- Which schema files have been applied to this database, so a later release can migrate it.
create table if not exists schema_migrations (
    version     integer primary key,
    name        varchar not null,
    applied_at  timestamptz not null default current_timestamp
);
