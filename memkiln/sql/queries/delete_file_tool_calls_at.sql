-- Some tool calls of one file (a large file's call written without its output, paired now).
delete from tool_calls where file_id = $fid and seq = any($seqs::integer[])
