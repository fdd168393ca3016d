-- One row per segment of a session: a run of related turns (memkiln/transforms/segments.py),
-- written when the session is extracted, whatever the backend. The heuristic backend makes
-- each segment a task of the memory.
create table if not exists segments (
    rollout_id     varchar not null,
    segment_index  integer not null,
    first_seq      integer not null,
    last_seq       integer not null,
    started_at     timestamptz,
    boundary       varchar not null,
    turns          integer not null,
    created_at     timestamptz not null
);
comment on table segments is 'Segments of each extracted session: runs of related turns split at a turn-count limit, a pause or an explicit switch of topic, with their item ranges. Replaced as a whole when the session is extracted again.';
comment on column segments.rollout_id is 'The session (rollouts.rollout_id).';
comment on column segments.segment_index is 'Position of the segment in its session, from 0; (rollout_id, segment_index) is unique.';
comment on column segments.first_seq is 'First kept item of the segment (items.seq).';
comment on column segments.last_seq is 'Last kept item of the segment (items.seq); the next segment starts after it.';
comment on column segments.started_at is 'Timestamp of the segment''s first turn (UTC); the first item''s when it has no turn.';
comment on column segments.boundary is 'Why the segment starts: start (the session''s first turn), topic_switch (the user opened with "now let''s", "switching to", "next task", ...), time_gap (a pause longer than the gap) or turn_limit (the turn-count limit was reached).';
comment on column segments.turns is 'User messages with the user''s own words in the segment.';
comment on column segments.created_at is 'When the segments were computed (UTC).';
