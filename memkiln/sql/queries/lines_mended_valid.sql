-- The lines of the registered batch_mended that are valid JSON once mended.
select fid, line_no, line
from batch_mended
where coalesce(json_valid(line), false)
