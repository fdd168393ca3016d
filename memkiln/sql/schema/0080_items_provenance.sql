-- Who wrote each item (memkiln/transforms/provenance.py): the user typed it, the agent wrote
-- it, a tool (a command, a file, a web page) produced it, or the harness or another model
-- injected it. Only the user's words can become preferences, decisions or facts.
alter table items add column if not exists provenance varchar;
comment on column items.provenance is 'Who wrote the item: user (typed by the user) | agent (the agent''s messages, tool calls and reasoning; a sub-agent''s prompt) | tool (tool results, command output shown in a user message: bash mode, local commands) | harness (injected by the harness or another model: compact summaries, reviewer results, hook output, skill bodies, environment context, system, developer and custom messages). Null for rows ingested before schema version 80 until their file is read again.';
-- Sessions stored before this column existed: forget the fingerprints of readable files, so
-- the next ingest reads them once more and fills it.
update files set mtime_ns = -1 where status in ('ok', 'partial');
