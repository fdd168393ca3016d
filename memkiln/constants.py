"""Tunables that are not user settings, grouped in one place."""

from __future__ import annotations

from typing import Final

#: Output tokens a stage-one answer may use (the default of the ``max_output_tokens``
#: setting; kept here so that loading the settings does not load the prompt templates).
STAGE_ONE_MAX_OUTPUT_TOKENS = 4000

#: Schema version this release writes; migrations in ``sql/schema`` bring older files up to it.
SCHEMA_VERSION = 2

#: Rows per DuckDB row group in the store (see ``memkiln.io.store``).
ROW_GROUP_SIZE = 2048

#: Files gathered into one batch at most (many tiny files still make bounded batches).
INGEST_BATCH_FILES = 2_000

#: Raw bytes of lines cleaned, parsed and normalized together: a file larger than this is
#: handled in parts, so ingest memory follows this size rather than the largest file.
PART_BYTES = 16 * 1024 * 1024

#: DuckDB's memory limit during an ingest: the rows of a large batch wait in its transaction,
#: and past this DuckDB writes them to the database file instead of holding them.
INGEST_DUCKDB_MEMORY = "256MB"

#: DuckDB threads of the store's connection during an ingest. Its work is one insert and one
#: commit per batch, beside the thread that prepares the next batch: on 2 cores, one DuckDB
#: thread wrote the same batches with 20% less CPU and in 17% less time than two
#: (bench/RESULTS.md, "ingest CPU, session 15").
INGEST_DUCKDB_THREADS = 1

#: DuckDB threads of the in-memory connection that parses an ingest batch's JSON. With two,
#: each thread's parse buffers came on top of the other's: the prepare step's peak memory was
#: about 130 MB higher for the same CPU (bench/RESULTS.md, "ingest CPU, session 16").
PARSER_DUCKDB_THREADS = 1

#: Polars' engine for the queries of an ingest batch: its frames are batch-sized, and the
#: streaming engine (Polars' default) cost ~15% more CPU on them in its set-up and threads than
#: the in-memory one (bench/RESULTS.md, "ingest CPU, session 15").
POLARS_ENGINE: Final = "in-memory"

#: How long Polars' allocator (jemalloc, configured by this variable when Polars is loaded)
#: keeps the pages it frees before giving them back to the kernel (Polars' own: 0.5 s, then
#: 1 s). Longer saves CPU (10 s: about 7% of an ingest's) but the pages kept add up over a long
#: ingest: with 10 s the peak grew from 0.74 GB (100 MiB archive) to 0.99 GB (1.6 GiB), with
#: 1 s to 0.84 GB (bench/RESULTS.md, "ingest CPU, sessions 15 and 16"). The console script sets
#: it unless it is set; a user who would trade memory for CPU can set 10000 themselves.
POLARS_ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
POLARS_ALLOCATOR_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:1000"
#: Arenas the C library's ``malloc`` (glibc) keeps at most, for every thread of a memkiln
#: process: its default, eight per core, let each of a run's threads (task runner workers,
#: model calls, the tokenizer, the redaction rules) keep the memory it freed, fragmented in
#: an arena of its own. Eight sessions of 60 MiB under Prefect with a model: 1.41-1.45 GB
#: with the default, 1.30 GB with two (bench/RESULTS.md, "Many large sessions at once, round
#: four"). The console script sets it unless ``MALLOC_ARENA_MAX`` is set.
MALLOC_ARENAS_ENV = "MALLOC_ARENA_MAX"
MALLOC_ARENAS = 2

#: Characters of a bad line kept, redacted, in the quarantine table.
QUARANTINE_EXCERPT_CHARS = 200

#: A JSON string value made of this many base64 characters or more is a blob (encrypted
#: reasoning, inline image data): it is replaced by a size note before anything is stored.
BLOB_MIN_CHARS = 512

#: Suffixes discovered as rollout files.
ROLLOUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")

#: The ``model`` the offline heuristic backend records for what it produces, in both phases
#: (``stage1_outputs``, ``consolidation_jobs``); bumped when its rules change what it writes.
#: v2: a session's segments as its tasks, outcomes from the stored exit data and the user's
#: words. Phase 2's records said ``heuristic-v1`` before this one name: on a store from then,
#: the first run consolidates each project once more (its input digest names the model) and
#: writes the same files.
HEURISTIC_MODEL = "heuristic-v2"

#: Sessions whose stage-one requests are prepared (and jobs claimed) together.
PREPARE_GROUP = 64

#: Stage-one outcomes are written in one transaction once this many are waiting …
FLUSH_OUTCOMES = 32
#: … or once this many seconds passed since the last write.
FLUSH_SECONDS = 0.5

#: A run publishes its progress for readers (``memkiln.io.snapshot``) at most this often …
PUBLISH_MIN_SECONDS = 2.0
#: … and spends at most about this share of its time copying (a copy that takes 1 s waits
#: 10 s for the next).
PUBLISH_COPY_SHARE = 0.1
#: How long a reader waits for a run that holds a never-published store to publish it.
PUBLISH_WAIT_SECONDS = 15.0
#: The DuckDB storage format new stores and every readers' copy are written in: the newest one
#: DuckDB 1.4 (the long-term release) and 1.5 read, so the DuckDB CLI, DBeaver and any tool on
#: DuckDB 1.4 or newer open ``<db>.snapshot``. DuckDB 2 writes version 69 by default, which no
#: 1.x opens.
READERS_STORAGE_VERSION = "v1.4.0"

#: Bytes a single line may hold: a longer one is not read into memory but quarantined as
#: ``line_too_long`` with its length, and the rest of its file kept.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Decompressed bytes of lines read from one file at most: past this, the rest of the file
#: is quarantined as ``file_too_large``. A file is read in pieces (``FILE_PIECE_BYTES``), so
#: this limit bounds what one file may store and how long it is read (a compressed file of
#: one repeated line can hold any amount), not memory: 1 GiB of lines is far past any real
#: session (the longest sessions seen hold tens of MiB) and far below what the store holds.
MAX_FILE_BYTES = 1024 * 1024 * 1024
#: Decompressed bytes of lines of a file read whole into its batch: a larger file is read,
#: normalized and written in pieces by the writer (``memkiln.io.large_file``), one piece at
#: a time, beside the next batch being prepared (bench/RESULTS.md, "Large session files").
WHOLE_FILE_BYTES = 32 * 1024 * 1024
#: Decompressed bytes of whole lines in one piece of a large file.
FILE_PIECE_BYTES = 16 * 1024 * 1024
#: Lines of one large file quarantined at most (not JSON, not an object, not UTF-8, too
#: long): past this, the rest of the file is not read (``too_many_bad_lines``). A session
#: damaged here and there stays far below it; a stream of garbage stops there.
MAX_BAD_LINES = 10_000
#: Decompressed bytes of a batch split, parsed and normalized together: a batch of small
#: compressed files that hold far more is normalized in parts of about this size.
BATCH_DECOMPRESSED_BYTES = 32 * 1024 * 1024
#: Characters of kept items held from each end of a session read for its stage-one request
#: once it passes four times this (``memkiln.io.session_items``; at least what the budget
#: keeps from each end): a session of up to ``MAX_FILE_BYTES`` is never held whole.
LARGE_SESSION_WINDOW_CHARS = 16 * 1024 * 1024
#: Characters of items in one piece of such a session read from the store.
SESSION_PIECE_CHARS = 16 * 1024 * 1024
#: Characters of kept items a group of sessions prepared together holds at most once read (a
#: session past four windows: two windows; a session larger alone is a group of its own).
#: Reading and rendering cost several times what they hold (one 30 MiB session: 28 MB of
#: items, +210 MB read, +370 MB rendered at peak), so two such sessions are not prepared
#: together: eight of them peaked at 1.28-1.34 GB under Prefect with a model, 1.34-1.50 GB
#: at four windows.
GROUP_HELD_CHARS = 2 * LARGE_SESSION_WINDOW_CHARS
#: Characters of kept items the sessions of a run being prepared or in flight hold together
#: at most (``transforms.sending.Holding``; a chunked session's request holds its rendered
#: items until its merge answers): the next group is prepared once the requests before it let
#: go of enough, a larger session alone once nothing is held. Without it, any number of
#: sessions could be in flight (``--concurrency``): eight of 60 MiB, six or seven in flight
#: together under Prefect, peaked at 1.71-1.83 GB; with it, 1.42-1.45 GB in about the same
#: time (47-50 s against 46-48 s; bench/RESULTS.md, "Many large sessions at once, round four").
HELD_IN_FLIGHT_CHARS = 4 * LARGE_SESSION_WINDOW_CHARS
