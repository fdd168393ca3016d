"""Prompt builders: one function per template, each owning its budget.

Templates are files in ``memkiln/templates`` rendered by jinja2 with ``StrictUndefined``, so a
missing variable is an error, not an empty string.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import jinja2

from memkiln.transforms.tokens import Truncation, count_tokens, stage_one_budget, truncate_middle

#: Bumped whenever a stage-one template changes what the model is asked; stored with outputs.
STAGE_ONE_PROMPT_VERSION = "stage1-v1"


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("memkiln", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
    )


@dataclass(frozen=True)
class StageOneInput:
    """The two messages of a stage-one request, their token counts and what the budget did."""

    system: str
    user: str
    truncation: Truncation
    system_tokens: int
    user_tokens: int


@cache
def _static_tokens(text: str) -> int:
    return count_tokens(text)


def build_stage_one_input(
    *,
    rollout_path: str,
    rollout_cwd: str | None,
    rollout_contents: str,
    context_window: int | None,
) -> StageOneInput:
    """Render the stage-one system prompt and user message; the contents are cut in the
    middle to ``context_window x 95% x 70%`` tokens (150,000 when the window is unknown)."""
    contents, truncation = truncate_middle(rollout_contents, stage_one_budget(context_window))
    env = environment()
    system = env.get_template("stage_one_system.md").render()
    template = env.get_template("stage_one_input.md")
    fields = {"rollout_path": rollout_path, "rollout_cwd": rollout_cwd or "unknown"}
    user = template.render(**fields, rollout_contents=contents)
    # an upper bound without encoding the message again: the frame, the contents, and a
    # token for each of the two joins
    frame_tokens = count_tokens(template.render(**fields, rollout_contents=""))
    return StageOneInput(
        system=system,
        user=user,
        truncation=truncation,
        system_tokens=_static_tokens(system),
        user_tokens=frame_tokens + truncation.tokens_after + 2,
    )


CONSOLIDATION_PROMPT_VERSION = "consolidate-v1"


@dataclass(frozen=True)
class ConsolidationInput:
    system: str
    user: str
    truncation: Truncation


def build_consolidation_input(
    *,
    project_key: str,
    current_memory: str | None,
    current_summary: str | None,
    added: str,
    removed: str,
    summary_files: list[str],
    context_window: int | None,
) -> ConsolidationInput:
    """Render the phase-2 messages; the added memories are cut in the middle when the whole
    would not fit ``context_window x 95% x 70%`` tokens."""
    env = environment()
    fixed = dict(
        project_key=project_key,
        current_memory=current_memory or "",
        current_summary=current_summary or "",
        removed=removed,
        summary_files="\n".join(f"- rollout_summaries/{name}" for name in summary_files)
        or "(none)",
    )
    template = env.get_template("consolidation_input.md")
    without_added = count_tokens(template.render(**fixed, added=""))
    budget = max(stage_one_budget(context_window) - without_added, 1_000)
    added_cut, truncation = truncate_middle(added, budget)
    return ConsolidationInput(
        system=env.get_template("consolidation_system.md").render(),
        user=template.render(**fixed, added=added_cut),
        truncation=truncation,
    )
