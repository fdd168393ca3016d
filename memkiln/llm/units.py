"""The stage-one work that needs no store, the units a task runner can spread, and their
forms on the wire.

Extraction's flow process reads the sessions, claims their jobs, decides what is sent (a
reused output, the budget, a failing service) and writes every outcome; the work between
needs no store and runs where the dispatch puts it:

- ``render_group``: a group of sessions (a prepare chunk) rendered from their kept items
  into their requests (``memkiln.llm.requests.render_requests``), chunked for a model;
  under the heuristic backend each session is also extracted there (its answer needs the
  items and costs nothing, so it is not a unit of its own);
- ``call``: one request sent to the model backend, its answer parsed and judged (a chunked
  session's chunk requests and their merge are one call).

``Local`` runs both in the flow's process (``--no-prefect``, the same functions as the
tasks). ``memkiln.flows.dispatch.Tasks`` submits them as Prefect tasks on the flow's task
runner (threads, or Dask worker processes), each building its backend from the options.
What crosses: dicts of plain values and frames (``*_to_wire`` / ``*_from_wire``; a frame as
``memkiln.io.loader.WireFrame``: shared as it is by the thread runner, Arrow IPC to a Dask
worker), never a connection. Copied as IPC in and out of every task, a chunked session's
texts took extraction to 2.2 GB for eight 30 MiB sessions under Prefect.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Coroutine
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import polars as pl

from memkiln.io.loader import WireFrame
from memkiln.io.rules import load_rules
from memkiln.llm.backends import Backend, Request
from memkiln.llm.choice import make_backend
from memkiln.llm.ratelimit import HOLD
from memkiln.llm.requests import render_requests
from memkiln.settings import Options, Settings
from memkiln.transforms.chunks import Chunk
from memkiln.transforms.heuristic import RolloutFacts
from memkiln.transforms.prompts import StageOneInput
from memkiln.transforms.redact import RuleSet, redact_text
from memkiln.transforms.render import NO_PARTS, ChunkParts
from memkiln.transforms.stage_one_answer import StageOneOutput
from memkiln.transforms.states import FailureReason, Outcome, OutcomeKind
from memkiln.transforms.tokens import Truncation

#: Model backends a worker process keeps open between its ``call`` tasks (keyed by the run's
#: settings; the oldest is closed when another run's settings come).
KEPT_BACKENDS = 2


@dataclass(frozen=True)
class Group:
    """Sessions whose requests are rendered together: their rows (``request_sessions``),
    their kept items sorted by session, and the input hashes whose output each may reuse."""

    meta: pl.DataFrame
    kept: pl.DataFrame
    reusable: dict[str, frozenset[str]]
    #: a model backend: sessions over the budget are sent in chunks
    chunked: bool
    #: the heuristic backend: each session is extracted with its rendering
    extract: bool


class Ready(NamedTuple):
    """A session's request, and its outcome when rendering already produced it."""

    request: Request
    outcome: Outcome | None = None


class Dispatch(Protocol):
    """Where the store-free work of a run goes."""

    #: groups rendered ahead at most (``1``: the next while the current one is sent)
    @property
    def ahead(self) -> int: ...

    def render(self, group: Group) -> list[Ready]:
        """Render ``group`` (blocking; called from a worker thread)."""
        ...

    async def call(self, request: Request) -> Outcome:
        """Send ``request``, not before the wall-clock time the run's pace set in this
        task's ``memkiln.llm.ratelimit.HOLD`` (the window's edge), and judge its answer."""
        ...

    def running(self) -> AbstractContextManager[None]:
        """Around the sending of a run that has sessions to send (in the main thread)."""
        ...

    def stop(self) -> None:
        """The run stopped (a signal): calls still running end now, their answers unused,
        and none sends another request (a chunked session's merge)."""
        ...

    def close(self) -> None: ...


def render_group(
    group: Group, *, settings: Settings, rules: RuleSet, backend: Backend | None
) -> list[Ready]:
    """Render a group's requests; with ``group.extract``, extract each session whose output
    cannot be reused with ``backend`` (the heuristic)."""
    requests = render_requests(
        group.meta, group.kept, settings=settings, rules=rules, chunked=group.chunked
    )
    if not group.extract:
        return [Ready(r) for r in requests]
    assert backend is not None, "a group extracted where it is rendered needs its backend"

    async def extract_all() -> list[Ready]:
        ready = []
        for r in requests:
            if r.input_hash in group.reusable.get(r.rollout_id, ()):
                ready.append(Ready(r))
            else:
                ready.append(Ready(r, await extract_one(backend, r, rules=rules)))
        return ready

    return asyncio.run(extract_all())


async def extract_one(backend: Backend, request: Request, *, rules: RuleSet) -> Outcome:
    """``backend``'s outcome for ``request``; a bug of the backend fails this session only
    (``internal_error``, the exception redacted) and the run goes on."""
    try:
        return await backend.extract(request)
    except Exception as exc:
        return internal_error(request, exc, rules=rules)


def internal_error(request: Request, exc: Exception, *, rules: RuleSet) -> Outcome:
    """The failed outcome of a session whose extraction raised ``exc`` (redacted)."""
    detail = redact_text(f"{type(exc).__name__}: {exc}"[:300], rules=rules)
    return Outcome(
        request.rollout_id, OutcomeKind.FAILED, reason=FailureReason.INTERNAL_ERROR, detail=detail
    )


class Local:
    """The work in this process: rendering in the engine's worker thread, calls on the
    engine's event loop with the run's own backend."""

    ahead = 1

    def __init__(self, backend: Backend, *, settings: Settings, rules: RuleSet) -> None:
        self.backend = backend
        self.settings = settings
        self.rules = rules

    def render(self, group: Group) -> list[Ready]:
        return render_group(group, settings=self.settings, rules=self.rules, backend=self.backend)

    async def call(self, request: Request) -> Outcome:
        # the backend holds the request until the window's edge in this task's ``HOLD``
        return await extract_one(self.backend, request, rules=self.rules)

    def running(self) -> AbstractContextManager[None]:
        return nullcontext()

    def stop(self) -> None:
        return None  # the calls ran on the run's own event loop, which cancelled them

    def close(self) -> None:
        return None


# -- task bodies (a worker process builds what it needs from the options) ------------------


def render_wire(group: dict[str, Any], options: Options) -> list[dict[str, Any]]:
    """``render_group`` for a group on the wire; the results on the wire."""
    settings = Settings.from_options(options)
    rules = load_rules()
    decoded = group_from_wire(group)
    backend = make_backend(settings, rules=rules) if decoded.extract else None
    ready = render_group(decoded, settings=settings, rules=rules, backend=backend)
    return [ready_to_wire(r) for r in ready]


def call_wire(request: dict[str, Any], options: Options) -> dict[str, Any]:
    """One request on the wire sent with this process's backend for ``options``; a call of
    a run that stopped (``stop_calls`` with the request's ``run``) ends at once, its answer
    unused."""
    rules = load_rules()
    backend = _kept_backend(options, rules)
    decoded = request_from_wire(request)
    run = str(request.get("run", ""))

    async def call() -> Outcome:
        # the backend holds the request until the window's edge (``memkiln.llm.ratelimit``)
        HOLD.set(request.get("hold"))
        return await extract_one(backend, decoded, rules=rules)

    outcome = asyncio.run(_stoppable(run, call()))
    return outcome_to_wire(outcome or stopped(decoded))


#: The calls running in this process (their task and its loop) by their run's token, and
#: the tokens of runs that stopped: their calls end, and none starts (a worker of a
#: long-lived Dask cluster serves later runs, whose tokens are new).
_calls: dict[asyncio.Task[Any], tuple[asyncio.AbstractEventLoop, str]] = {}
_stopped: set[str] = set()
_calls_lock = threading.Lock()


async def _stoppable(key: str, work: Coroutine[Any, Any, Outcome]) -> Outcome | None:
    """``work``'s outcome, or None when its run stopped before or while it ran."""
    task = asyncio.current_task()
    assert task is not None, "a call runs as a task"
    with _calls_lock:
        if key in _stopped:
            work.close()
            return None
        _calls[task] = (asyncio.get_running_loop(), key)
    try:
        return await work
    except asyncio.CancelledError:
        if key not in _stopped:
            raise
        return None
    finally:
        with _calls_lock:
            _calls.pop(task, None)


def stop_calls(run: str) -> None:
    """The run whose requests carry the token ``run`` stopped: its calls running in this
    process are cancelled (the request in flight is let go, no further request of a chunked
    session is sent), and its calls not started yet end at once."""
    key = run
    with _calls_lock:
        _stopped.add(key)
        for task, (loop, of) in _calls.items():
            if of == key:
                with suppress(RuntimeError):  # its loop already closed
                    loop.call_soon_threadsafe(task.cancel)


def stopped(request: Request) -> Outcome:
    """The outcome of a call ended by its run's stop (never recorded: the run has stopped)."""
    return Outcome(
        request.rollout_id,
        OutcomeKind.FAILED,
        reason=FailureReason.INTERNAL_ERROR,
        detail="the run stopped before the answer came",
        input_hash=request.input_hash,
    )


def _key(options: Options) -> str:
    return repr(sorted(dict(options).items()))


_backends: OrderedDict[str, Backend] = OrderedDict()
_backends_lock = threading.Lock()


def _kept_backend(options: Options, rules: RuleSet) -> Backend:
    """The model backend of ``options`` in this process, built once (its client and threads
    serve every call of the run)."""
    key = _key(options)
    with _backends_lock:
        backend = _backends.get(key)
        if backend is None:
            backend = make_backend(Settings.from_options(options), rules=rules)
            _backends[key] = backend
            while len(_backends) > KEPT_BACKENDS:
                _, old = _backends.popitem(last=False)
                _close(old)
        return backend


def close_kept_backends() -> None:
    """Close the backends this process kept for ``call`` tasks (the flow's process, at the
    end of a run under the thread runner)."""
    with _backends_lock:
        while _backends:
            _close(_backends.popitem()[1])


def _close(backend: Backend) -> None:
    asyncio.run(backend.aclose())


# -- on the wire -------------------------------------------------------------------------


def group_to_wire(group: Group) -> dict[str, Any]:
    return {
        "meta": WireFrame(group.meta),
        "kept": WireFrame(group.kept),
        "reusable": {rid: sorted(hashes) for rid, hashes in group.reusable.items()},
        "chunked": group.chunked,
        "extract": group.extract,
    }


def group_from_wire(wire: dict[str, Any]) -> Group:
    return Group(
        meta=wire["meta"].frame,
        kept=wire["kept"].frame,
        reusable={rid: frozenset(h) for rid, h in wire["reusable"].items()},
        chunked=wire["chunked"],
        extract=wire["extract"],
    )


def ready_to_wire(ready: Ready) -> dict[str, Any]:
    outcome = None if ready.outcome is None else outcome_to_wire(ready.outcome)
    return {"request": request_to_wire(ready.request), "outcome": outcome}


def ready_from_wire(wire: dict[str, Any]) -> Ready:
    outcome = None if wire["outcome"] is None else outcome_from_wire(wire["outcome"])
    return Ready(request_from_wire(wire["request"]), outcome)


def request_to_wire(request: Request) -> dict[str, Any]:
    """A request without its items (a model backend reads only its messages; the heuristic
    is run where the items are)."""
    facts = request.facts
    return {
        "rollout_id": request.rollout_id,
        "facts": [facts.rollout_id, facts.cwd, _time(facts.updated_at)],
        "prompt": _prompt_to_wire(request.prompt),
        "input_hash": request.input_hash,
        "parts": _parts_to_wire(request.parts),
        "header": list(request.header),
    }


def request_from_wire(wire: dict[str, Any]) -> Request:
    rid, cwd, updated_at = wire["facts"]
    path, header_cwd = wire["header"]
    return Request(
        rollout_id=wire["rollout_id"],
        items=pl.DataFrame(),
        facts=RolloutFacts(rollout_id=rid, cwd=cwd, updated_at=_from_time(updated_at)),
        prompt=_prompt_from_wire(wire["prompt"]),
        input_hash=wire["input_hash"],
        parts=_parts_from_wire(wire["parts"]),
        header=(path, header_cwd),
    )


def _parts_to_wire(parts: ChunkParts) -> dict[str, Any] | None:
    """A chunked session's parts as they are held: its texts, its chunks."""
    if not parts:
        return None
    return {
        "texts": WireFrame(parts.texts.to_frame()),
        "chunks": [asdict(c) for c in parts.chunks],
        "header": [parts.rollout_path, parts.rollout_cwd],
        "context_window": parts.context_window,
        "max_output_tokens": parts.max_output_tokens,
        "input_tokens": list(parts.input_tokens),
        "cut": parts.cut,
    }


def _parts_from_wire(wire: dict[str, Any] | None) -> ChunkParts:
    if wire is None:
        return NO_PARTS
    path, cwd = wire["header"]
    return ChunkParts(
        texts=wire["texts"].frame.to_series(),
        chunks=tuple(Chunk(**c) for c in wire["chunks"]),
        rollout_path=path,
        rollout_cwd=cwd,
        context_window=wire["context_window"],
        max_output_tokens=wire["max_output_tokens"],
        input_tokens=tuple(wire["input_tokens"]),
        cut=wire["cut"],
    )


def _prompt_to_wire(prompt: StageOneInput) -> dict[str, Any]:
    t = prompt.truncation
    # the budget's own record (a text kept whole is counted only if ever asked)
    truncation = {"budget": t.budget, "before": t._before, "after": t._after, "whole": t._whole}
    return {
        "system": prompt.system,
        "user": prompt.user,
        "frame": prompt.frame,
        "truncation": truncation,
    }


def _prompt_from_wire(wire: dict[str, Any]) -> StageOneInput:
    t = wire["truncation"]
    truncation = Truncation(t["budget"], before=t["before"], after=t["after"], whole=t["whole"])
    return StageOneInput(
        system=wire["system"], user=wire["user"], truncation=truncation, frame=wire["frame"]
    )


_OUTCOME_FIELDS = tuple(f.name for f in fields(Outcome))


def outcome_to_wire(outcome: Outcome) -> dict[str, Any]:
    wire = {name: getattr(outcome, name) for name in _OUTCOME_FIELDS}
    wire["output"] = None if outcome.output is None else outcome.output.model_dump()
    wire["started_at"] = _time(outcome.started_at)
    return wire


def outcome_from_wire(wire: dict[str, Any]) -> Outcome:
    values = dict(wire)
    if values["output"] is not None:
        values["output"] = StageOneOutput.model_validate(values["output"])
    values["started_at"] = _from_time(values["started_at"])
    return Outcome(**values)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _from_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
