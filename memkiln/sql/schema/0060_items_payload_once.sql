-- Each payload is stored once: items.text keeps the searchable text, and payload_json keeps
-- the line (or content block) without the field that text (or parts) already holds, so a
-- tool output is no longer compressed and stored twice. Rows written before this version
-- keep the whole line until their file is read again; nothing needs it whole (the full
-- payload is payload_json with text put back under the field named by the item's type).
comment on column items.payload_json is 'The line''s (or content block''s) compact JSON, redacted, blobs replaced by size notes, without the field whose value is the item''s text or parts (stored once, in text/parts): payload.output of a tool output, payload.arguments of a call, payload.content of a message, message.content of a Claude Code/Pi line, text/thinking/input/arguments/content of a block. Null for a content block that is a bare string (all text). Rows ingested before schema version 60 hold the whole line.';
