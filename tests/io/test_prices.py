"""Prices come from genai-prices (offline, bundled), the prices setting overrides or adds
one, and an unknown price is None (never $0), refused when a budget is set."""

from __future__ import annotations

import pytest

from memkiln.errors import ConfigError
from memkiln.io.prices import PriceBook, check_budget_prices
from memkiln.transforms.estimate import format_cost


def test_a_known_model_is_priced_by_genai_prices() -> None:
    book = PriceBook()
    # gpt-4.1-mini: $0.40 per million input tokens, $1.60 per million output tokens
    assert book.cost("openai", "gpt-4.1-mini", 1_000_000, 100_000) == pytest.approx(0.56)
    assert book.source("openai", "gpt-4.1-mini") == "genai-prices"


def test_the_setting_overrides_a_price_and_adds_a_model() -> None:
    book = PriceBook({"gpt-4.1-mini": (1.0, 2.0), "my-local-model": (0.1, 0.2)})
    assert book.cost("openai", "gpt-4.1-mini", 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert book.cost("openai", "my-local-model", 2_000_000, 0) == pytest.approx(0.2)
    assert book.source("openai", "my-local-model") == "settings"


def test_an_unknown_price_is_none_and_shown_as_price_unknown_never_zero() -> None:
    book = PriceBook()
    assert book.cost("openai", "no-such-model-anywhere", 1000, 1000) is None
    assert book.source("openai", "no-such-model-anywhere") == "unknown"
    assert format_cost(None) == "price unknown"
    assert format_cost(0.0) == "0.0000"


def test_the_heuristic_backend_is_free() -> None:
    assert PriceBook().cost("heuristic", "heuristic-v1", 10**9, 10**9) == 0.0


def test_a_budget_needs_a_known_price() -> None:
    book = PriceBook()
    with pytest.raises(ConfigError, match="price of model 'mystery' is unknown"):
        check_budget_prices(book, backend="openai", model="mystery", budget=1.0)
    check_budget_prices(book, backend="openai", model="mystery", budget=None)
    check_budget_prices(book, backend="openai", model="gpt-4.1-mini", budget=1.0)
