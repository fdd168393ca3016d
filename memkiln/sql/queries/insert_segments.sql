-- The segments of the sessions just segmented (registered as new_segments).
insert into segments by name
select * from new_segments;
