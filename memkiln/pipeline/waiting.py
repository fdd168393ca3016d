"""``--wait`` on the Batch API (openai-batch) for ``extract``, ``run`` and ``backfill``: one
command submits, polls and applies.

The extraction phase submits its batch (or finds batches still open from an earlier run);
with ``--wait``, the command then polls every open batch (every ``--poll-interval``
seconds, one line per batch whose status changed, ``memkiln.pipeline.batch_jobs.wait``)
until each has ended, and runs the phase again: that run applies what ended (a request the
batch failed leaves its session failed with its reason, the others are applied) and takes
what is eligible then, as a backfill's next round does; until no batch is running. The
phase's runs are reported as one. Nothing here imports Prefect.
"""

# No ``from __future__ import annotations``: see memkiln/flows/run.py.
import sys
from collections.abc import Callable, Sequence

from memkiln.pipeline.batch_jobs import wait_for_batches
from memkiln.settings import Options, Settings
from memkiln.transforms.summaries import ExtractSummary


def wait_then_again(settings: Options, extracted: ExtractSummary) -> bool:
    """With ``--wait`` (openai-batch), wait for the Batch API jobs still running to end; True
    when there were some (the next extraction run applies them and goes on)."""
    running = extracted.batched or extracted.batches_open  # submitted now, or still open before
    if not (settings.wait and running) or settings.dry_run:
        return False
    return wait_for_batches(Settings.from_options(settings), say=_say) > 0


def until_applied(
    extract_once: Callable[[float], ExtractSummary], settings: Options
) -> ExtractSummary:
    """``extract_once(spent_before)``, the extraction phase on the job's runner; with
    ``--wait`` and batches running, wait for them and run it again (it applies what ended),
    until none is running. The runs as one summary."""
    rounds = [extract_once(0.0)]
    while wait_then_again(settings, rounds[-1]):
        rounds.append(extract_once(sum(r.cost_usd for r in rounds)))
    return rounds[0] if len(rounds) == 1 else combined(rounds)


def combined(runs: Sequence[ExtractSummary]) -> ExtractSummary:
    """Several extraction runs as one: counts added up, the last run's stop reason."""
    total = ExtractSummary(run_id=runs[-1].run_id if runs else "")
    for one in runs:
        total.taken += one.taken
        total.batched += one.batched
        total.batches_open = one.batches_open
        total.requests += one.requests
        total.input_tokens += one.input_tokens
        total.output_tokens += one.output_tokens
        total.cost_usd += one.cost_usd
        total.price_known = total.price_known and one.price_known
        total.orphans_taken_over += one.orphans_taken_over
        for key, n in one.outcomes.items():
            total.outcomes[key] = total.outcomes.get(key, 0) + n
        total.sessions_failed += one.sessions_failed
        total.sessions_chunked += one.sessions_chunked
        total.chunk_requests += one.chunk_requests
        total.merge_requests += one.merge_requests
        total.chunks_cut += one.chunks_cut
        total.rate_limited += one.rate_limited
        total.reserved_usd = max(total.reserved_usd, one.reserved_usd)
    if runs:
        total.budget_usd = runs[0].budget_usd
        total.spent_before_usd = runs[0].spent_before_usd
        last = runs[-1]
        total.considered, total.decisions = last.considered, dict(last.decisions)
        total.stopped, total.budget_reached = last.stopped, last.budget_reached
        total.estimate = last.estimate
    return total


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
