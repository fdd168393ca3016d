"""Model prices: the ``genai-prices`` package's bundled data (maintained upstream, read
offline: nothing is downloaded at run time), overridden or extended by the ``prices``
setting (USD per million input and output tokens, by model name).

A model whose price neither knows has no cost: ``None``, shown as "price unknown", never
$0. With a budget (``budget_usd``) such a model is a configuration error before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from memkiln.errors import ConfigError

#: Provider whose prices a model name is looked up under first (the openai backend speaks
#: its API); other providers are tried after it.
DEFAULT_PROVIDER = "openai"
#: What the Batch API costs, as a share of the synchronous price.
BATCH_DISCOUNT = 0.5
#: Backends that call no paid model.
FREE_BACKENDS = ("heuristic",)


@lru_cache(maxsize=256)
def _package_cost(model: str, tokens_in: int, tokens_out: int) -> float | None:
    """Cost from genai-prices, or None when it knows no price for ``model``."""
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    for provider in (DEFAULT_PROVIDER, None):
        try:
            price = calc_price(usage, model_ref=model, provider_id=provider)
        except LookupError:
            continue
        return float(price.total_price)
    return None


@dataclass(frozen=True)
class PriceBook:
    """Prices of the models a run uses."""

    overrides: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def known(self, backend: str, model: str) -> bool:
        return self.cost(backend, model, 1_000, 1_000) is not None

    def source(self, backend: str, model: str) -> str:
        """Where the price comes from: ``free``, ``settings``, ``genai-prices`` or
        ``unknown``."""
        if backend in FREE_BACKENDS:
            return "free"
        if model in self.overrides:
            return "settings"
        return "genai-prices" if self.known(backend, model) else "unknown"

    def cost(self, backend: str, model: str, tokens_in: int, tokens_out: int) -> float | None:
        """USD for a request's tokens; None when the model's price is unknown."""
        if backend in FREE_BACKENDS:
            return 0.0
        share = BATCH_DISCOUNT if backend == "openai-batch" else 1.0
        if model in self.overrides:
            per_in, per_out = self.overrides[model]
            return share * (tokens_in * per_in + tokens_out * per_out) / 1_000_000
        cost = _package_cost(model, max(tokens_in, 0), max(tokens_out, 0))
        return None if cost is None else share * cost


def check_budget_prices(book: PriceBook, *, backend: str, model: str, budget: float | None) -> None:
    """A budget needs a price: fail before any work when the model has none."""
    if budget is not None and not book.known(backend, model):
        raise ConfigError(
            f"--budget-usd is set but the price of model {model!r} is unknown (not in "
            "genai-prices); add it to the prices setting, e.g. "
            f"MEMKILN_PRICES='{{\"{model}\": [0.25, 2.0]}}' (USD per million input, output tokens)"
        )
