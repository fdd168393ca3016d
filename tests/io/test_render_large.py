"""``memkiln render-input`` on a session file past WHOLE_FILE_BYTES of lines: read in pieces
through a scratch store (``memkiln.io.render_large``), its message is the whole session's,
end included (before, only the first 32 MiB of lines were read: the end was never shown)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from memkiln.io.archive import FileStat
from memkiln.io.render_large import large_file_input
from memkiln.io.rules import load_rules
from memkiln.llm.requests import stage_one_input_for_file
from tests.builders import uid
from tests.commands import MEMKILN
from tests.io.test_large_file import FINAL, long_session, write_session

RULES = load_rules()


def stat_of(path: Path) -> FileStat:
    st = os.stat(path)
    return FileStat(str(path.resolve()), st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("kind", ["plain", "zst"])
def test_a_file_read_in_pieces_gets_the_message_it_gets_read_whole(
    tmp_path: Path, kind: str
) -> None:
    path = write_session(tmp_path / "archive", 3, long_session(3, mib=2), kind)
    for window in (None, 12_000):
        whole, facts = stage_one_input_for_file(
            path, context_window=window, max_output_tokens=2000, rules=RULES
        )
        pieces, large_facts = large_file_input(
            path, stat_of(path), context_window=window, max_output_tokens=2000, rules=RULES
        )
        assert (pieces.system, pieces.user) == (whole.system, whole.user)
        assert large_facts == facts


def test_render_input_of_a_40_mib_session_shows_its_end(tmp_path: Path) -> None:
    path = write_session(tmp_path / "archive", 4, long_session(4, mib=40), "zst")
    done = subprocess.run(
        [MEMKILN, "render-input", str(path)], capture_output=True, text=True, check=False,
        env={**os.environ, "MEMKILN_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert FINAL in done.stdout  # the session's last item, past the first 32 MiB
    assert "tokens truncated" in done.stdout
    assert uid(4) in done.stderr
