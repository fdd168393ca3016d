-- The chunk counts of a batch of attempts (``chunked``) on their history rows.
update stage1_attempts as a
set
    chunk_requests = c.chunk_requests,
    merge_requests = c.merge_requests,
    chunks_mid_turn = c.chunks_mid_turn,
    chunks_cut = c.chunks_cut
from chunked as c
where a.run_id = $run_id and a.rollout_id = c.rollout_id and a.attempt = c.attempt;
