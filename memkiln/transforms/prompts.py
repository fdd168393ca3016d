"""Prompt builders: one function per template, each owning its budget.

Templates are files in ``memkiln/templates`` rendered by jinja2 with ``StrictUndefined``, so a
missing variable is an error, not an empty string.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, cached_property

import jinja2

# the default of the max_output_tokens setting (re-exported: llm.requests imports it from here)
from memkiln.constants import STAGE_ONE_MAX_OUTPUT_TOKENS as STAGE_ONE_MAX_OUTPUT_TOKENS
from memkiln.transforms.raw_memory import format_description
from memkiln.transforms.text import escaped_line
from memkiln.transforms.tokens import Truncation, count_tokens, stage_one_budget, truncate_middle

#: Bumped whenever a stage-one template changes what the model is asked; stored with outputs.
STAGE_ONE_PROMPT_VERSION = "stage1-v2"  # v2: roles by provenance, commands by exit
#: Characters of an untrusted value (a path, a cwd, a project key) shown in a prompt header.
HEADER_VALUE_CHARS = 300
#: The tag that closes the block of rollout contents; no value or content may spell it.
CLOSING_TAG_START = "</"


def escape_block(contents: str) -> str:
    """Contents placed between tags, unable to close them: every ``</`` becomes ``<\\/``
    (the contents are JSON lines, where ``\\/`` is the same ``/``)."""
    return contents.replace(CLOSING_TAG_START, "<\\/")


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("memkiln", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
    )


@cache
def stage_one_system() -> str:
    """The stage-one system prompt, with the raw-memory format it asks for written by
    ``memkiln.transforms.raw_memory`` (the format's one owner)."""
    template = environment().get_template("stage_one_system.md")
    return template.render(raw_memory_format=format_description())


@dataclass(frozen=True)
class StageOneInput:
    """The two messages of a stage-one request and what the budget did; their token counts
    are computed on first use (see ``Truncation``)."""

    system: str
    user: str
    truncation: Truncation
    frame: str = field(repr=False)  # the user message without the rollout contents

    @cached_property
    def system_tokens(self) -> int:
        return _static_tokens(self.system)

    @cached_property
    def user_tokens(self) -> int:
        """An upper bound without encoding the message again: the frame, the contents, and a
        token for each of the two joins."""
        return count_tokens(self.frame) + self.truncation.tokens_after + 2

    def tokens_needed(self, reserve: int, window: int) -> int | None:
        """The messages' tokens plus ``reserve`` when that exceeds ``window``, else None.
        Nothing is encoded when the messages' size (a token is at least one byte) proves
        that they fit."""
        size = len(self.system.encode("utf-8")) + len(self.user.encode("utf-8"))
        if size + reserve <= window:
            return None
        needed = self.system_tokens + self.user_tokens + reserve
        return needed if needed > window else None


def window_shortfall(
    prompts: Iterable[StageOneInput], *, reserve: int, window: int | None
) -> str | None:
    """Why these requests cannot be sent: ``"N tokens needed, window W"`` for the first whose
    messages plus ``reserve`` output tokens exceed the model's ``window``; None when every
    one fits or no window is set. The one check of a stage-one request against the window."""
    if not window:
        return None
    for prompt in prompts:
        needed = prompt.tokens_needed(reserve, window)
        if needed:
            return f"{needed} tokens needed, window {window}"
    return None


@cache
def _static_tokens(text: str) -> int:
    return count_tokens(text)


def build_stage_one_input(
    *,
    rollout_path: str,
    rollout_cwd: str | None,
    rollout_contents: str,
    context_window: int | None,
    max_output_tokens: int = STAGE_ONE_MAX_OUTPUT_TOKENS,
    omitted_chars: int = 0,
    part: str = "",
    contents_tokens: int | None = None,
) -> StageOneInput:
    """Render the stage-one system prompt and user message; the contents are cut in the
    middle to ``context_window x 95% x 70%`` tokens (150,000 when the window is unknown),
    or fewer when the window would not also hold the system prompt, the rest of the user
    message and ``max_output_tokens`` (``stage_one_budget``). ``omitted_chars`` counts
    items already left out of the middle of ``rollout_contents`` (``stage_one_keep_chars``).

    The path and the cwd come from the session, not from memkiln: they go in escaped, on one
    line, capped (``escaped_line``), and no ``</`` inside the contents can close their block.

    ``part`` (a chunk of a session too long for one request, ``memkiln.transforms.chunks``)
    is a line placed before the contents; a session sent whole has none. A chunk's planner
    knows an upper bound of its contents' tokens (``contents_tokens``): within the budget,
    the contents are not encoded again.
    """
    env = environment()
    template = env.get_template("stage_one_input.md")
    fields = {**_header(rollout_path, rollout_cwd), "part": part}
    system = stage_one_system()
    frame = template.render(**fields, rollout_contents="")
    budget = _contents_budget(system, frame, context_window, max_output_tokens)
    contents = escape_block(rollout_contents)
    if contents_tokens is not None and contents_tokens <= budget and not omitted_chars:
        truncation = Truncation(budget, before=contents_tokens, after=contents_tokens)
    else:
        contents, truncation = truncate_middle(contents, budget, omitted_chars=omitted_chars)
    return StageOneInput(
        system=system,
        user=template.render(**fields, rollout_contents=contents),
        truncation=truncation,
        frame=frame,
    )


def _header(rollout_path: str, rollout_cwd: str | None) -> dict[str, str]:
    return {
        "rollout_path": escaped_line(rollout_path, HEADER_VALUE_CHARS),
        "rollout_cwd": escaped_line(rollout_cwd, HEADER_VALUE_CHARS) if rollout_cwd else "unknown",
    }


def _contents_budget(
    system: str, frame: str, context_window: int | None, max_output_tokens: int
) -> int:
    """The tokens the data of a stage-one message may take (``stage_one_budget``), beside
    ``system``, the rest of the user message (``frame``) and the output reserve."""
    budget = stage_one_budget(context_window)
    if context_window:
        # a token is at least one byte: count the messages only when their size does not
        # prove that the share of the window leaves them room
        reserved = len(system.encode("utf-8")) + len(frame.encode("utf-8")) + max_output_tokens
        if stage_one_budget(context_window, reserved_tokens=reserved) < budget:
            reserved = _static_tokens(system) + count_tokens(frame) + 2 + max_output_tokens
            budget = stage_one_budget(context_window, reserved_tokens=reserved)
    return budget


#: Bumped whenever the merge template changes; part of a chunked session's input hash.
STAGE_ONE_MERGE_VERSION = "stage1-merge-v1"


def build_stage_one_merge_input(
    *,
    rollout_path: str,
    rollout_cwd: str | None,
    partials: str,
    context_window: int | None,
    max_output_tokens: int = STAGE_ONE_MAX_OUTPUT_TOKENS,
) -> StageOneInput:
    """The request that merges the partial memories of a chunked session
    (``memkiln.transforms.chunks.partial_block``, joined) into one stage-one output: the
    stage-one system prompt (the same schema and rules) and the merge template, the partials
    under the same budget as a session's contents (cut in the middle only when a group of
    partials planned by ``merge_groups`` still exceeds it)."""
    env = environment()
    template = env.get_template("stage_one_merge_input.md")
    fields = _header(rollout_path, rollout_cwd)
    system = stage_one_system()
    frame = template.render(**fields, partials="")
    budget = _contents_budget(system, frame, context_window, max_output_tokens)
    contents, truncation = truncate_middle(escape_block(partials), budget)
    return StageOneInput(
        system=system,
        user=template.render(**fields, partials=contents),
        truncation=truncation,
        frame=frame,
    )


CONSOLIDATION_PROMPT_VERSION = "consolidate-v2"  # v2: the guidance line, do/avoid, topic index


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
        project_key=escaped_line(project_key, HEADER_VALUE_CHARS),
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
