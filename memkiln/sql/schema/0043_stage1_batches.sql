-- Stage-one requests sent through the OpenAI Batch API (--backend openai-batch): each batch
-- from the upload of its input file to the application of its answers.
create table if not exists stage1_batches (
    input_file_id   varchar primary key,
    batch_id        varchar,
    run_id          varchar not null,
    model           varchar not null,
    status          varchar not null,
    requests        bigint not null,
    output_file_id  varchar,
    error_file_id   varchar,
    created_at      timestamptz not null,
    updated_at      timestamptz not null
);
comment on table stage1_batches is 'Stage-one batches of the OpenAI Batch API: uploaded, created, polled, then applied through the same parsing, redaction and outcome code as the synchronous backend.';
comment on column stage1_batches.input_file_id is 'The uploaded JSONL of requests (custom_id = rollout id); stored before the batch is created, so a run killed in between creates it from this file, never sending twice.';
comment on column stage1_batches.batch_id is 'The batch (null between upload and creation).';
comment on column stage1_batches.run_id is 'The run that submitted it (runs.run_id).';
comment on column stage1_batches.model is 'The model of every request of the batch.';
comment on column stage1_batches.status is 'uploaded (not created yet), then the Batch API''s status: validating, in_progress, finalizing, completed, failed, expired, cancelling, cancelled; applied once its outcomes are stored.';
comment on column stage1_batches.requests is 'Requests in the batch.';
comment on column stage1_batches.output_file_id is 'The file of answers, once the batch ended.';
comment on column stage1_batches.error_file_id is 'The file of failed requests, once the batch ended.';
comment on column stage1_batches.created_at is 'When the input file was uploaded (UTC).';
comment on column stage1_batches.updated_at is 'When the batch was last polled or changed (UTC).';

create table if not exists stage1_batch_items (
    input_file_id  varchar not null,
    rollout_id     varchar not null,
    input_hash     varchar not null,
    attempt        integer not null,
    watermark      timestamptz
);
comment on table stage1_batch_items is 'The sessions of each stage-one batch, with what their outcomes are recorded with.';
comment on column stage1_batch_items.input_file_id is 'The batch (stage1_batches.input_file_id).';
comment on column stage1_batch_items.rollout_id is 'The session, and the custom_id of its request.';
comment on column stage1_batch_items.input_hash is 'Hash of the request''s messages (stage1_outputs.input_hash).';
comment on column stage1_batch_items.attempt is 'The attempt number of this request.';
comment on column stage1_batch_items.watermark is 'rollouts.updated_at of the version sent.';
