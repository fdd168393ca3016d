-- Insert what a batch could not read (b_quarantine), with its run.
insert into quarantine by name
select
    $run_id as run_id,
    file_id,
    path,
    line_no,
    reason,
    detail,
    excerpt,
    bytes,
    $at as detected_at
from b_quarantine;
