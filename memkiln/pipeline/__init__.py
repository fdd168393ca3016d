"""Each job's recipe, written once: its numbered steps, and where each runs left to the
``Runner`` it is given (``memkiln.pipeline.runner``). Nothing here imports Prefect."""
