-- The views were created from the view files with this digest.
delete from schema_views;
insert into schema_views (digest) values ($digest);
