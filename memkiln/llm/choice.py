"""The backend a run's settings name: the heuristic, the OpenAI API, or its Batch API."""

from __future__ import annotations

from memkiln.errors import ConfigError
from memkiln.llm.backends import Backend, HeuristicBackend, OpenAIBackend
from memkiln.llm.batch import OpenAIBatchBackend
from memkiln.settings import Settings
from memkiln.transforms.redact import RuleSet


def make_backend(settings: Settings, *, rules: RuleSet) -> Backend:
    if settings.backend == "heuristic":
        return HeuristicBackend(rules=rules)
    if settings.backend == "openai":
        return OpenAIBackend(settings, rules=rules)
    if settings.backend == "openai-batch":
        return OpenAIBatchBackend(settings, rules=rules)
    raise ConfigError(
        f"unknown backend {settings.backend!r}; use heuristic, openai or openai-batch"
    )
