"""``--task-runner dask`` leaves nothing of Dask's on stderr in an ordinary run (a cron job's
log): its local cluster takes no fixed port, so a second run on the same machine (another
database, another user's Dask) starts without a warning, and nothing of it listens beyond
the loopback interface; a chunk of sessions sent to a worker (Arrow IPC, tens of MB by
design) draws no "large graph" warning."""

from __future__ import annotations

import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from memkiln.flows.task_runners import task_runner

#: The port Dask's scheduler serves its HTTP routes on by default.
DASK_HTTP_PORT = 8787


@contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` on the loopback held by someone else for the block (already so, or here)."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
    except OSError:
        pass  # another process holds it already: the same situation
    try:
        yield
    finally:
        holder.close()


def test_the_local_cluster_starts_quietly_when_dasks_default_port_is_taken() -> None:
    from distributed import LocalCluster

    runner = task_runner("dask", workers=1)
    with port_taken(DASK_HTTP_PORT), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with LocalCluster(**runner.cluster_kwargs) as cluster:
            http = cluster.scheduler.http_server
            addresses = {s.getsockname()[0] for s in http._sockets.values()}
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "already in use" in m], said
    assert addresses <= {"127.0.0.1"}, addresses


def test_a_chunk_of_sessions_of_tens_of_megabytes_is_sent_without_a_warning() -> None:
    from distributed import Client, LocalCluster

    runner = task_runner("dask", workers=1)
    chunk = b"x" * (24 * 1024 * 1024)  # a chunk of 64 corpus sessions was 19 MiB
    with (
        LocalCluster(**runner.cluster_kwargs) as cluster,
        Client(cluster) as client,
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        assert client.submit(len, chunk).result() == len(chunk)
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "large graph" in m], said
