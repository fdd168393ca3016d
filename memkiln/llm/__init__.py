"""The model side of memkiln, phase 1 and phase 2 side by side: the backends (openai,
openai-batch, heuristic), the stage-one request builder, the extraction engine and phase 2's
model calls. Above ``io`` (the store, the files) and ``transforms`` (pure decisions); used by
``flows``."""
