-- Sessions over the budget are extracted in chunks of whole turns whose partial memories are
-- merged by one more request: what each attempt sent, and what (if anything) it had to cut.
alter table stage1_attempts add column if not exists chunk_requests integer;
alter table stage1_attempts add column if not exists merge_requests integer;
alter table stage1_attempts add column if not exists chunks_mid_turn integer;
alter table stage1_attempts add column if not exists chunks_cut integer;
comment on column stage1_attempts.chunk_requests is 'Chunk requests sent for a session over the budget (null: the session went in one request).';
comment on column stage1_attempts.merge_requests is 'Requests that merged the chunks'' partial memories into the one stage-one output (null: not chunked).';
comment on column stage1_attempts.chunks_mid_turn is 'Chunks that start inside a turn, because that turn alone was over the budget (null: not chunked).';
comment on column stage1_attempts.chunks_cut is 'Messages cut in the middle (the truncation fallback): a chunk, or the single message, holding one item over the budget alone, or merge input over it; null or 0: nothing of the session was left out.';
