-- The digest of the view definitions last created in this database: a store is opened
-- several times per run, and its views are re-created only when memkiln's view files (or the
-- tables, through a migration) changed since.
create table if not exists schema_views (
    digest      varchar not null,
    created_at  timestamptz not null default current_timestamp
);

comment on table schema_views is 'Digest of the view files the views were last created from (one row): views are re-created when it differs.';
comment on column schema_views.digest is 'SHA-256 of every sql/views file name and text, in name order.';
comment on column schema_views.created_at is 'When the views were last created.';
