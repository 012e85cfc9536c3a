"""Every worker of a real cluster dies mid-computation: a clear error after a bounded wait.

Dask waits for new workers forever; :func:`scalenc.engine.cluster.compute` gives up after
``scalenc.no-workers-timeout`` seconds with :class:`ClusterUnavailableError`. The cluster is
the ``dask scheduler`` and two nanny-less ``dask worker`` processes of
``tests/engine/test_cluster.py`` (:class:`DaskProcesses`, slow kernel on the workers), both workers
SIGKILLed by the PIDs the test started while a pass or a write is running.
"""

from __future__ import annotations

import gc
import signal
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from test_cluster import fresh_processes, slow_fit_data, slow_linear  # noqa: F401 - fixture

import scalenc
from scalenc import EncoderClassifier, write_output
from scalenc.engine.cluster import NO_WORKERS_CONFIG, ClusterUnavailableError, no_workers_timeout
from scalenc.engine.reduce import SCATTER_BYTES, _shared

pytestmark = pytest.mark.cluster

WAIT = 3.0  # the no-workers timeout the tests set, in seconds
MATCH = r"has had no workers for 3 s during the computation.*Nothing was written as complete"


def kill_all_workers_when_busy(procs, killed: dict) -> threading.Thread:
    """In a thread: once a worker is inside a slow kernel call, SIGKILL every worker."""

    def run():
        procs.wait_for_kernel_call()
        for worker in procs.workers:
            procs.kill(worker)
        killed["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_bounded(killed: dict, raised_at: float, procs) -> None:
    assert all(w.returncode == -signal.SIGKILL for w in procs.workers)
    waited = raised_at - killed["at"]
    assert WAIT <= waited < WAIT + 15, waited  # after the wait, not long after it


def released(client, timeout=10.0) -> bool:
    """Whether the client holds no keys (after collecting garbage; releases are async)."""
    deadline = time.monotonic() + timeout
    while client.futures and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return not client.futures


def test_config_key():
    assert no_workers_timeout() == 300.0
    with dask.config.set({NO_WORKERS_CONFIG: None}):
        assert no_workers_timeout() is None
    with dask.config.set({NO_WORKERS_CONFIG: "1 minute"}):
        assert no_workers_timeout() == 60.0


@pytest.mark.slow  # every worker of a fresh cluster killed mid-fit (20-50 s); the error's config key is tested above
def test_all_workers_killed_mid_fit(fresh_processes):  # noqa: F811 - the fixture
    X, y = slow_fit_data()
    killed = {}
    with (
        dask.config.set({NO_WORKERS_CONFIG: WAIT}),
        scalenc.connect(scheduler_file=fresh_processes.scheduler_file, quiet=True) as client,
    ):
        fresh_processes.worker_pids(client)  # the workers are the processes started here
        killer = kill_all_workers_when_busy(fresh_processes, killed)
        with pytest.raises(ClusterUnavailableError, match=MATCH):
            EncoderClassifier(kernels=(slow_linear,)).fit(X, y)
        raised_at = time.monotonic()
        killer.join(timeout=30)
        assert_bounded(killed, raised_at, fresh_processes)
        assert len(client.nthreads()) == 0
        assert released(client)  # the fit's tasks and persisted labels were let go
        # a large argument cannot be scattered either: the same error, not a hang
        with pytest.raises(ClusterUnavailableError, match="no workers"):
            _shared({"basis": np.ones(SCATTER_BYTES // 4)})


@pytest.mark.slow  # 9 s; the mid-fit kill test stays in the default run
def test_all_workers_killed_mid_write_leaves_no_output(fresh_processes, tmp_path):  # noqa: F811
    X, y = slow_fit_data()
    with scalenc.connect("threads"):  # the kernel is slow on the workers only
        model = EncoderClassifier(kernels=(slow_linear,)).fit(X, y)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "predictions.zarr"
    killed = {}
    with (
        dask.config.set({NO_WORKERS_CONFIG: WAIT}),
        scalenc.connect(scheduler_file=fresh_processes.scheduler_file, quiet=True),
    ):
        pred = model.predict(X)
        assert isinstance(pred, da.Array)
        killer = kill_all_workers_when_busy(fresh_processes, killed)
        with pytest.raises(ClusterUnavailableError, match=MATCH):
            write_output(pred, out)
        raised_at = time.monotonic()
        killer.join(timeout=30)
    assert_bounded(killed, raised_at, fresh_processes)
    assert sorted(p.name for p in out_dir.iterdir()) == []  # no output, no leftovers
