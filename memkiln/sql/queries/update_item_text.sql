-- One stored item's text replaced (redacted further: a large file's tool output whose end
-- held half of a token cut by the next piece's first tool output).
update items set text = $text where file_id = $fid and seq = $seq
