-- A large file's tool call whose output was redacted further once written (its end held half
-- of a token cut by the next piece's first tool output): its error line taken again from the
-- output's new text, when it was a line of the old text that the new one no longer holds.
update tool_calls set error_line = $line
where file_id = $fid
    and call_id = $call_id
    and error_line is not null
    and contains($old, error_line)
    and not contains($new, error_line)
