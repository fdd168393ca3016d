"""A frame a task runner carries: shared within a process, Arrow IPC across processes."""

from __future__ import annotations

import pickle

import polars as pl
from polars.testing import assert_frame_equal

from memkiln.io.loader import WireFrame, frame_to_ipc


def frame() -> pl.DataFrame:
    return pl.DataFrame({"seq": [1, 2, 3], "text": ["a", "é" * 1000, None]})


def test_within_a_process_the_frame_is_handed_over_not_copied() -> None:
    original = frame()
    assert WireFrame(original).frame is original


def test_across_processes_it_is_pickled_as_its_arrow_ipc_stream_and_comes_back_equal() -> None:
    original = frame()
    carried = WireFrame(original)
    assert carried.__reduce__()[1] == (frame_to_ipc(original),)  # no pickled rows
    back = pickle.loads(pickle.dumps(carried))
    assert isinstance(back, WireFrame) and back.frame is not original
    assert_frame_equal(back.frame, original)
