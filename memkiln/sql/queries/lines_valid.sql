-- Whether each line of the registered batch_all is valid JSON.
select fid, line_no, coalesce(json_valid(line), false) as valid
from batch_all
