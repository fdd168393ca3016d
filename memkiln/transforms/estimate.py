"""Estimates of what model requests will use, before they are sent: the dry run's figures
and the budget's reservation for a request in flight. Pure functions; counts use the
tokenizer and budget of the real requests (``memkiln.transforms.tokens``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from memkiln.transforms.prompts import ConsolidationInput, StageOneInput
from memkiln.transforms.report import Row, Section
from memkiln.transforms.tokens import count_tokens

#: Tokens of a chat request besides its two messages' texts: 3 per message and 3 that prime
#: the reply, as OpenAI counts chat requests.
CHAT_OVERHEAD_TOKENS = 9
#: A stage-one answer's output tokens when no earlier answer of the model is known.
DEFAULT_STAGE_ONE_OUTPUT_TOKENS = 700
#: Output tokens a phase-2 answer may use.
CONSOLIDATION_MAX_OUTPUT = 16_000
#: The fewest output tokens a phase-2 request is sent with: a smaller context window leaves a
#: project's request failed with ``context_overflow``.
CONSOLIDATION_MIN_OUTPUT = 2_000
#: A phase-2 answer's output tokens when no earlier answer of the model is known.
DEFAULT_CONSOLIDATION_OUTPUT_TOKENS = 3_000


def request_input_tokens(prompt: StageOneInput) -> int:
    """Input tokens of a stage-one request: both messages and the chat overhead."""
    return prompt.system_tokens + prompt.user_tokens + CHAT_OVERHEAD_TOKENS


def consolidation_input_tokens(prompt: ConsolidationInput) -> int:
    """Input tokens of a phase-2 request (both messages and the chat overhead)."""
    return count_tokens(prompt.system) + count_tokens(prompt.user) + CHAT_OVERHEAD_TOKENS


def expected_output_tokens(past_mean: float | None, *, default: int, limit: int) -> int:
    """Output tokens to expect of an answer: the mean of the model's earlier answers, else
    ``default``; never more than the request's limit."""
    guess = default if past_mean is None or past_mean <= 0 else round(past_mean)
    return max(1, min(guess, limit))


class OutputBasis(NamedTuple):
    """Where a phase's expected output tokens per request come from: the figure used, the
    mean of the model's earlier answers (None: there were none) and how many, and the stated
    default used without them."""

    per_request: int
    past_mean: float | None
    answers: int
    default: int

    def shown(self) -> str:
        if self.past_mean is None:
            return f"{self.per_request:,} (the default: no earlier answer of this model)"
        return (
            f"{self.per_request:,} (mean of {self.answers:,} earlier requests: "
            f"{self.past_mean:,.0f}; the default {self.default:,})"
        )


@dataclass
class Estimate:
    """What a dry run found and would spend, per model (``usage``: (phase, backend, model)
    -> [requests, input tokens, output tokens, cost or None when the price is unknown])."""

    sessions_found: int = 0
    sessions_eligible: int = 0
    sessions_done: int = 0
    sessions_to_do: int = 0
    projects_to_do: int = 0
    usage: dict[tuple[str, str, str], list[float | None]] = field(default_factory=dict)
    #: per phase, where the expected output tokens per request come from
    output_basis: dict[str, OutputBasis] = field(default_factory=dict)

    def add(
        self,
        phase: str,
        backend: str,
        model: str,
        *,
        requests: int,
        input_tokens: int,
        output_tokens: int,
        cost: float | None,
    ) -> None:
        row = self.usage.setdefault((phase, backend, model), [0, 0, 0, 0.0])
        row[0] = (row[0] or 0) + requests
        row[1] = (row[1] or 0) + input_tokens
        row[2] = (row[2] or 0) + output_tokens
        row[3] = None if row[3] is None or cost is None else row[3] + cost

    @property
    def input_tokens(self) -> int:
        return int(sum(row[1] or 0 for row in self.usage.values()))

    @property
    def output_tokens(self) -> int:
        return int(sum(row[2] or 0 for row in self.usage.values()))

    @property
    def cost_usd(self) -> float | None:
        costs = [row[3] for row in self.usage.values()]
        return None if any(c is None for c in costs) else float(sum(c or 0.0 for c in costs))

    def as_json(self) -> dict[str, object]:
        """The object ``--dry-run --json`` prints."""
        return {
            "sessions_found": self.sessions_found,
            "sessions_eligible": self.sessions_eligible,
            "sessions_done": self.sessions_done,
            "sessions_to_do": self.sessions_to_do,
            "projects_to_do": self.projects_to_do,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "price_known": self.cost_usd is not None,
            "per_model": [
                {
                    "phase": phase,
                    "backend": backend,
                    "model": model,
                    "requests": int(row[0] or 0),
                    "input_tokens": int(row[1] or 0),
                    "output_tokens": int(row[2] or 0),
                    "cost_usd": row[3],
                }
                for (phase, backend, model), row in sorted(self.usage.items())
            ],
            "output_tokens_per_request": {
                phase: basis._asdict() for phase, basis in sorted(self.output_basis.items())
            },
        }


def format_cost(cost: float | None) -> str:
    """A cost as summaries show it: "price unknown" rather than $0."""
    return "price unknown" if cost is None else f"{cost:,.4f}"


def estimate_section(estimate: Estimate) -> Section:
    """A dry run's summary: sessions, then requests, tokens and cost per phase and model."""
    rows: list[Row] = [
        ("sessions found", f"{estimate.sessions_found:,}"),
        ("  eligible", f"{estimate.sessions_eligible:,}"),
        ("  already done", f"{estimate.sessions_done:,}"),
        ("  to do", f"{estimate.sessions_to_do:,}"),
        ("projects with sessions to do", f"{estimate.projects_to_do:,}"),
    ]
    for (phase, backend, model), (requests, tokens_in, tokens_out, cost) in sorted(
        estimate.usage.items()
    ):
        rows += [
            (f"{phase}: {backend} {model}", f"{int(requests or 0):,} model requests"),
            ("  input tokens (estimate)", f"{int(tokens_in or 0):,}"),
            ("  output tokens (estimate)", f"{int(tokens_out or 0):,}"),
            ("  cost USD (estimate)", format_cost(cost)),
        ]
        if phase in estimate.output_basis:
            rows.append(("  output tokens per request", estimate.output_basis[phase].shown()))
    rows += [
        ("input tokens, total", f"{estimate.input_tokens:,}"),
        ("output tokens, total", f"{estimate.output_tokens:,}"),
        ("cost USD, total", format_cost(estimate.cost_usd)),
    ]
    return ("memkiln dry run (no model called)", rows)


def consolidation_output_tokens(input_tokens: int, context_window: int | None) -> int | None:
    """The output tokens a phase-2 request may ask for: what the window leaves after the
    input, at most ``CONSOLIDATION_MAX_OUTPUT``; None when that is under
    ``CONSOLIDATION_MIN_OUTPUT`` (the request does not fit)."""
    if not context_window:
        return CONSOLIDATION_MAX_OUTPUT
    room = min(CONSOLIDATION_MAX_OUTPUT, context_window - input_tokens)
    return room if room >= CONSOLIDATION_MIN_OUTPUT else None
