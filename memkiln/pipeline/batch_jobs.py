"""Batch API jobs against the store (``--backend openai-batch``): submitted by one run, applied
by a later one; the request lines and answers themselves: ``memkiln.llm.batch``.

1. submit: a run's requests as JSONL (``custom_id`` = rollout id, the body the ``openai``
   backend sends), uploaded; the file id, its sessions and their jobs (owned by
   ``batch:<file id>``) are stored before the batch is created, so that a run killed in
   between creates the batch from the stored file (after looking for one made from it):
   a request is never sent twice
2. poll (every later run, before selecting): each open batch is retrieved; one that ended is
   read (output and error files) and applied through the same parsing, redaction and outcome
   code as the synchronous backend; a request the batch failed, or left unanswered (expired,
   cancelled), becomes a failed job with its reason
3. wait (``memkiln backfill --wait``): the open batches' statuses polled every
   ``--poll-interval`` seconds, one line per batch, until every one has ended (then a run's
   ``poll`` applies them)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import duckdb
import openai
import polars as pl

from memkiln.io.rules import load_rules
from memkiln.io.store import execute, now, open_store, transaction
from memkiln.llm.backends import Request
from memkiln.llm.batch import BATCH_LEASE, ENDED, OWNER_PREFIX, OpenAIBatchBackend, batch_answers
from memkiln.settings import Settings
from memkiln.transforms.states import Finished


def open_owners(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """The owners of the jobs held by batches not applied yet (they are not orphans)."""
    rows = execute(con, "batch_owners", prefix=OWNER_PREFIX).fetchall()
    return tuple(r[0] for r in rows)


@dataclass(frozen=True)
class Item:
    request: Request
    watermark: datetime | None
    attempt: int


def submit(
    con: duckdb.DuckDBPyConnection,
    backend: OpenAIBatchBackend,
    items: list[Item],
    *,
    run_id: str,
) -> bool:
    """Upload the items' requests, store the batch and hand its jobs to it, then create the
    batch; False when it could not be created now (the next run's ``poll`` creates it)."""
    data = "".join(json.dumps(backend.line(i.request)) + "\n" for i in items).encode()
    uploaded = backend.client.files.create(file=("stage1.jsonl", data), purpose="batch")
    at = now()
    frame = pl.DataFrame(
        {
            "rollout_id": [i.request.rollout_id for i in items],
            "input_hash": [i.request.input_hash for i in items],
            "attempt": [i.attempt for i in items],
            "watermark": [i.watermark for i in items],
        },
        schema={
            "rollout_id": pl.String,
            "input_hash": pl.String,
            "attempt": pl.Int32,
            "watermark": pl.Datetime("us", "UTC"),
        },
    )
    with transaction(con, batch_items=frame):
        execute(
            con,
            "batch_insert",
            file=uploaded.id,
            run_id=run_id,
            model=backend.model,
            n=len(items),
            at=at,
        )
        execute(con, "batch_items_insert", file=uploaded.id)
        owner = OWNER_PREFIX + uploaded.id
        execute(con, "batch_hold_jobs", owner=owner, lease=at + BATCH_LEASE, at=at)
    return create(con, backend, uploaded.id)


def create(con: duckdb.DuckDBPyConnection, backend: OpenAIBatchBackend, file_id: str) -> bool:
    """Create the batch of an uploaded file, unless one was made from it already; False
    when the Batch API cannot be reached or refuses now (the file stays stored as uploaded,
    its jobs held, and the next run's ``poll`` creates the batch)."""
    endpoint = "/v1/responses" if backend.api == "responses" else "/v1/chat/completions"
    try:
        found = [b for b in backend.client.batches.list(limit=100) if b.input_file_id == file_id]
        batch = found[0] if found else backend.client.batches.create(
            # endpoint: one of the two literals the client's stub lists, chosen above
            input_file_id=file_id, endpoint=endpoint, completion_window="24h",  # type: ignore[arg-type]
            metadata={"memkiln": "stage1"},
        )  # fmt: skip
    except openai.APIError:
        return False
    execute(con, "batch_created", batch_id=batch.id, status=batch.status, at=now(), file=file_id)
    return True


def poll(con: duckdb.DuckDBPyConnection, backend: OpenAIBatchBackend) -> tuple[list[Finished], int]:
    """Bring every open batch forward; returns the outcomes of the batches that ended (to be
    recorded by the caller, then ``mark_applied``) and how many batches are still open."""
    rows = execute(con, "batches_open").fetchall()
    finished: list[Finished] = []
    still_open = 0
    for file_id, batch_id, _status in rows:
        if batch_id is None:  # killed between upload and creation, or creation refused
            create(con, backend, file_id)
            still_open += 1
            continue
        try:
            batch = backend.client.batches.retrieve(batch_id)
        except openai.APIError:
            still_open += 1
            continue
        execute(
            con,
            "batch_status",
            status=batch.status,
            output_file=batch.output_file_id,
            error_file=batch.error_file_id,
            at=now(),
            file=file_id,
        )
        if batch.status not in ENDED:
            still_open += 1
            continue
        answers: dict[str, dict[str, Any]] = {}
        try:
            for kind in (batch.output_file_id, batch.error_file_id):
                if kind:
                    answers |= batch_answers(backend.client.files.content(kind).text)
        except openai.APIError:  # its files cannot be read now: the next run reads them
            still_open += 1
            continue
        items = execute(con, "batch_items_of", file=file_id).fetchall()
        for rid, input_hash, attempt, watermark in items:
            result = backend.outcome(rid, answers.get(rid), input_hash)
            if rid not in answers and batch.status != "completed":
                result = replace(result, reason=f"batch_{batch.status}")
            finished.append(Finished(result, watermark, int(attempt)))
    return finished, still_open


def open_batches(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str | None]]:
    """``(input file, batch id or None: not created yet)`` of the batches not applied."""
    return [(file_id, batch_id) for file_id, batch_id, _ in execute(con, "batches_open").fetchall()]


def wait(
    backend: OpenAIBatchBackend,
    batches: list[tuple[str, str | None]],
    *,
    interval: float,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll ``batches`` every ``interval`` seconds until each has ended (or has no batch
    yet: the next run's ``poll`` creates it), saying each one's status and counts whenever
    they change. A poll the service does not answer is tried again at the next one."""
    last: dict[str, str] = {}
    while True:
        waiting = 0
        for file_id, batch_id in batches:
            if batch_id is None:
                line = f"batch of {file_id}: not created yet (the next poll creates it)"
                ended = True
            else:
                try:
                    batch = backend.client.batches.retrieve(batch_id)
                except openai.APIError as exc:
                    line = f"batch {batch_id}: not answered ({type(exc).__name__})"
                    ended = False
                else:
                    counts = batch.request_counts
                    done = f", {counts.completed} of {counts.total} answered, " if counts else ""
                    failed = f"{counts.failed} failed" if counts else ""
                    line = f"batch {batch_id}: {batch.status}{done}{failed}"
                    ended = batch.status in ENDED
            if last.get(file_id) != line:
                say(line)
                last[file_id] = line
            waiting += not ended
        if not waiting:
            if any(batch_id is None for _, batch_id in batches):
                sleep(interval)  # its creation was refused: not at once again
            return
        sleep(interval)


def wait_for_batches(settings: Settings, *, say: Callable[[str], None]) -> int:
    """``wait`` for the store's open batches with the settings' backend; how many there
    were (0: nothing to wait for)."""
    con = open_store(settings.db, read_only=True)
    try:
        batches = open_batches(con)
    finally:
        con.close()
    if not batches:
        return 0
    backend = OpenAIBatchBackend(settings, rules=load_rules())
    try:
        wait(backend, batches, interval=settings.poll_interval_s, say=say)
    finally:
        asyncio.run(backend.aclose())
    return len(batches)


def mark_applied(con: duckdb.DuckDBPyConnection) -> None:
    """Batches whose outcomes were recorded."""
    execute(con, "batches_applied", at=now())
