"""Where a job's steps run: the ``Runner`` a recipe is given, and the one of this process.

A recipe (``memkiln.pipeline.run.run_job``, …) says what is done in which order; its runner
says where: ``LocalRunner`` does everything in this process (``--no-prefect``, tests,
benchmarks); ``memkiln.flows.tasks.PrefectRunner`` runs the job as a Prefect flow, each phase
as a task and each store-free step as a task on the flow's task runner (threads, or Dask
workers). Nothing here imports Prefect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from memkiln.io.signals import interruptible

if TYPE_CHECKING:
    from memkiln.io.progress import Reporter
    from memkiln.llm.units import Dispatch
    from memkiln.settings import Settings
    from memkiln.transforms.report import Section

A = TypeVar("A")
T = TypeVar("T")


class Resolvable(Protocol):
    def result(self) -> Any: ...


class Runner(Protocol):
    """Where a job's recipe, its phases and their store-free steps run."""

    def job(self, recipe: Callable[..., T], settings: Settings, *args: Any) -> T:
        """Run ``recipe(settings, runner, *args)``: here, or as the recipe's Prefect flow."""
        ...

    def phase(
        self,
        phase: Callable[..., T],
        settings: Settings,
        *,
        parent_run_id: str | None,
        reporter: Reporter,
        **kwargs: Any,
    ) -> T:
        """Run one phase of a job (``phase(settings, runner=, reporter=, **kwargs)``): a call,
        or a task whose run records name ``parent_run_id`` as their parent."""
        ...

    @property
    def spreads(self) -> bool:
        """Whether ``map`` sends the steps to a task runner's workers; when it does not, a
        phase does that work in this process its own way (no Arrow IPC round trip)."""
        ...

    def map(self, step: Callable[..., T], items: Iterable[tuple[Any, ...]]) -> Iterator[T]:
        """``step(*item)`` for every item, in order, as many in flight as the runner has
        workers (``step`` is a module-level function: it may run in another process)."""
        ...

    def dispatch(self, settings: Settings) -> Dispatch | None:
        """Where extraction's rendering and model calls go (``None``: this process)."""
        ...

    def guarded(self) -> AbstractContextManager[None]:
        """Around a job's phases: a stop signal becomes ``Interrupted``."""
        ...

    def flow_run_id(self) -> str | None:
        """The Prefect flow run the job's run records link to, if any."""
        ...

    def log_phase(self, section: Section) -> None:
        """A phase's counts as it ends, where the runner logs them."""
        ...

    def report(self, title: str, sections: Sequence[Section], notes: Sequence[str]) -> None:
        """The job's summary, where the runner shows it (the CLI prints its own)."""
        ...


class LocalRunner:
    """Everything in this process: a phase is a call, a step is called in order."""

    spreads = False

    def job(self, recipe: Callable[..., T], settings: Settings, *args: Any) -> T:
        return recipe(settings, self, *args)

    def phase(
        self,
        phase: Callable[..., T],
        settings: Settings,
        *,
        parent_run_id: str | None,
        reporter: Reporter,
        **kwargs: Any,
    ) -> T:
        # the run records of a phase here link to the job's through ``linked_runs``
        return phase(settings, runner=self, reporter=reporter, **kwargs)

    def map(self, step: Callable[..., T], items: Iterable[tuple[Any, ...]]) -> Iterator[T]:
        for item in items:
            yield step(*item)

    def dispatch(self, settings: Settings) -> Dispatch | None:
        return None

    def guarded(self) -> AbstractContextManager[None]:
        return interruptible()

    def flow_run_id(self) -> str | None:
        return None

    def log_phase(self, section: Section) -> None:
        return None

    def report(self, title: str, sections: Sequence[Section], notes: Sequence[str]) -> None:
        return None


def ordered_results(
    submit: Callable[[A], Resolvable], args: Iterable[A], *, ahead: int
) -> Iterator[Any]:
    """``submit(a).result()`` for every ``a`` of ``args``, in order, keeping ``ahead`` (at
    least one) submitted while the caller holds the result handed over: memory holds at most
    ``ahead + 1`` results, whatever the length of ``args``."""
    ahead = max(1, ahead)
    pending: deque[Resolvable] = deque()
    it = iter(args)
    for a in it:
        pending.append(submit(a))
        if len(pending) >= ahead:
            break
    while pending:
        result = pending.popleft().result()
        for a in it:
            pending.append(submit(a))
            break
        yield result
        del result
