"""The process a benchmark phase runs in: the environment of its child, and the settings the
console script gives its own process before Polars loads, so a phase runs as ``memkiln``
would."""

from __future__ import annotations

import os

#: Polars' allocator setting (see ``memkiln.constants.POLARS_ALLOCATOR_CONF``).
ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
#: As given to the benchmark: importing Polars in the benchmark's own process writes Polars'
#: setting into its environment, which its children must not inherit.
GIVEN_ALLOCATOR = os.environ.get(ALLOCATOR_ENV)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a phase's child: no ``MEMKILN_*`` setting, Polars'
    allocator setting only if the benchmark was given one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMKILN_")}
    env.pop(ALLOCATOR_ENV, None)
    if GIVEN_ALLOCATOR is not None:
        env[ALLOCATOR_ENV] = GIVEN_ALLOCATOR
    return {**env, **extra}


def console_script_defaults() -> str:
    """Give this process what the console script gives its own before Polars loads (the
    code's ``allocator_defaults``; code older than it had none). Call it first in a phase.
    Returns Polars' allocator setting in force."""
    try:
        from memkiln.cli import allocator_defaults
    except ImportError:
        pass
    else:
        allocator_defaults()
    return os.environ.get(ALLOCATOR_ENV) or "Polars' own"
