"""Every worker of a real cluster is paused for memory: a clear error after a bounded wait.

A Dask worker whose process memory is above its pause threshold
(``distributed.worker.memory.pause``, 80 % of ``--memory-limit``) and has nothing to spill
runs no task; Dask waits for it forever. :func:`scalenc.engine.cluster.compute` counts such a
cluster as one without a running worker and gives up after ``scalenc.no-workers-timeout``
seconds with :class:`ClusterUnavailableError`, saying the workers are paused and how much
memory they use; a worker that resumes before then lets the fit finish, with the same model
as the threaded scheduler's.

The cluster is a real ``dask scheduler`` and one nanny-less ``dask worker`` process on
127.0.0.1 (the plumbing of ``tests/engine/test_cluster.py``'s :class:`DaskProcesses`), with a small
memory limit, spilling off and no termination. The worker pauses because the test makes it
hold a buffer (:func:`hold_memory`, run in the worker process by ``client.run``) and resumes
when it lets go of it (:func:`release_memory`).
"""

from __future__ import annotations

import sys
import threading
import time

import dask
import numpy as np
import pytest
from test_cluster import (
    DASK,
    DaskProcesses,
    assert_same_model,
    outputs,
    slow_fit_data,
    slow_linear,
)
from test_cluster_no_workers import released

import scalenc
from scalenc import EncoderClassifier
from scalenc.engine.cluster import NO_WORKERS_CONFIG, ClusterUnavailableError
from scalenc.engine.reduce import SCATTER_BYTES, _shared

pytestmark = pytest.mark.cluster

MEMORY_LIMIT = 400 * 2**20  # the worker's --memory-limit, bytes
PAUSE = 0.8  # distributed.worker.memory.pause, set explicitly on the worker
WAIT = 5.0  # the no-running-worker timeout the tests set, in seconds
RESTART_WAIT = 6.0  # the timeout of the test that pauses the worker twice, in seconds
PAUSED_FOR = 4.0  # how long it pauses each time: twice is more than RESTART_WAIT, once less
BUFFER = "_scalenc_test_buffer"  # where hold_memory keeps its buffer in the worker (sys)
MATCH = (
    r"has had no running worker for 5 s during the computation: its 1 worker\(s\) take no "
    r"task \(1 paused\)(?s:.*)paused, process memory \d+(\.\d+)? MiB of its 400\.00 MiB limit"
    r" \(\d+ %\)"
    r"(?s:.*)Nothing was written as complete(?s:.*)distributed\.worker\.memory\.pause"
    r"(?s:.*)--memory-limit(?s:.*)--nthreads(?s:.*)chunk_rows(?s:.*)client\.restart\(\)"
    r"(?s:.*)'scalenc\.no-workers-timeout'"
)


# --- in the worker process (imported there from tests/, see DaskProcesses._env) ----------


def hold_memory(fraction: float, dask_worker) -> int:
    """Hold a buffer that brings this process's memory to ``fraction`` of the worker's
    memory limit, every page written so that it is resident; return the process memory."""
    import psutil

    limit = dask_worker.memory_manager.memory_limit
    rss = psutil.Process().memory_info().rss
    setattr(sys, BUFFER, bytearray(b"\1") * max(int(fraction * limit) - rss, 2**20))
    return psutil.Process().memory_info().rss


def release_memory() -> int:
    """Let go of :func:`hold_memory`'s buffer; return the process memory."""
    import gc

    import psutil

    if hasattr(sys, BUFFER):
        delattr(sys, BUFFER)
    gc.collect()
    return psutil.Process().memory_info().rss


# --- the cluster ------------------------------------------------------------------------


class SmallWorkerCluster(DaskProcesses):
    """A ``dask scheduler`` and one ``dask worker`` of MEMORY_LIMIT bytes that pauses at
    PAUSE of it and neither spills nor is terminated (so only memory it holds pauses it)."""

    def __init__(self, root, *, slow: float = 0.0):
        super().__init__(root, n_workers=0, slow=slow)

    def _env(self):
        env = super()._env()
        env.update(
            DASK_DISTRIBUTED__WORKER__MEMORY__TARGET="False",
            DASK_DISTRIBUTED__WORKER__MEMORY__SPILL="False",
            DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=str(PAUSE),
            DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE="False",
        )
        return env

    def wait_for_workers(self, n):
        if n:  # not for the scheduler alone
            super().wait_for_workers(n)

    def start(self):
        super().start()  # the scheduler alone
        args = [DASK, "worker", "--scheduler-file", str(self.scheduler_file)]
        args += ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0", "--nthreads", "1"]
        args += ["--no-nanny", "--death-timeout", "60", "--memory-limit", str(MEMORY_LIMIT)]
        self.workers.append(self._popen([*args, "--name", "small"], "worker0", env=self._env()))
        self.wait_for_workers(1)
        return self


@pytest.fixture
def small_cluster(tmp_path):
    procs = SmallWorkerCluster(tmp_path / "cluster")
    try:
        yield procs.start()
    finally:
        procs.close()


@pytest.fixture
def slow_small_cluster(tmp_path):
    """The same, its worker sleeping 0.25 s in each ``slow_linear`` kernel call."""
    procs = SmallWorkerCluster(tmp_path / "cluster", slow=0.25)
    try:
        yield procs.start()
    finally:
        procs.close()


def worker_status(client) -> str:
    (info,) = client.scheduler_info(n_workers=-1)["workers"].values()
    return info["status"]


def wait_for_status(client, status: str, timeout: float = 30.0) -> None:
    """Poll the scheduler until its only worker reports ``status``."""
    end = time.monotonic() + timeout
    while worker_status(client) != status:
        if time.monotonic() > end:
            raise TimeoutError(f"the worker is {worker_status(client)!r}, not {status!r}")
        time.sleep(0.05)


def pause(client) -> None:
    """Make the worker hold memory until the scheduler sees it paused."""
    client.run(hold_memory, 0.95)
    wait_for_status(client, "paused")


def resume(client) -> None:
    client.run(release_memory)
    wait_for_status(client, "running")


def warm_up(client) -> None:
    """Import what a fit imports in the worker before measuring its memory."""
    X, y = slow_fit_data(n=600, chunk=300)
    EncoderClassifier(kernels=(slow_linear,)).fit(X, y)


def waiting_tasks(client) -> int:
    """Tasks the scheduler holds back for want of a running worker."""
    return client.run_on_scheduler(
        lambda dask_scheduler: len(dask_scheduler.queued) + len(dask_scheduler.unrunnable)
    )


# --- tests ------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_paused_worker_fit_fails_after_the_wait(small_cluster):
    """Paused before the fit and for good: ClusterUnavailableError after the wait, naming
    the paused worker, its memory and what to do; the worker is left as it was."""
    X, y = slow_fit_data(n=2000, chunk=250)
    with (
        dask.config.set({NO_WORKERS_CONFIG: WAIT}),
        scalenc.connect(scheduler_file=small_cluster.scheduler_file, quiet=True) as client,
    ):
        small_cluster.worker_pids(client)  # the worker is the process started here
        warm_up(client)
        pause(client)
        started = time.monotonic()
        with pytest.raises(ClusterUnavailableError, match=MATCH) as raised:
            EncoderClassifier(kernels=("linear",)).fit(X, y)
        waited = time.monotonic() - started
        assert WAIT <= waited < WAIT + 15, waited  # after the wait, not long after it
        assert worker_status(client) == "paused"  # it was not killed nor restarted
        memory = float(raised.value.args[0].split("process memory ")[1].split(" MiB")[0])
        assert memory > PAUSE * MEMORY_LIMIT / 2**20
        assert released(client)  # the fit's tasks and persisted labels were let go
        # a large argument cannot be scattered to it either: the same error, not a hang
        with pytest.raises(ClusterUnavailableError, match=r"take no task \(1 paused\)"):
            _shared({"basis": np.ones(SCATTER_BYTES // 4)})
        # once it resumes, the same client fits again on the same worker
        resume(client)
        model = EncoderClassifier(kernels=("linear",)).fit(X, y)
    with scalenc.connect("threads"):
        ref = EncoderClassifier(kernels=("linear",)).fit(X, y)
    assert_same_model(model, ref, rtol=1e-12)


def fit_in_thread(make, X, y, result: dict) -> threading.Thread:
    """``make().fit(X, y)`` in a thread; the model or the error lands in ``result``."""

    def fit():
        try:
            result["model"] = make().fit(X, y)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            result["error"] = exc

    fitter = threading.Thread(target=fit, daemon=True)
    fitter.start()
    return fitter


def finish(fitter: threading.Thread, result: dict):
    fitter.join(timeout=90)
    assert not fitter.is_alive(), "the fit did not finish after the worker resumed"
    if "error" in result:
        raise result["error"]
    return result["model"]


@pytest.mark.slow  # a second cluster pause (20-45 s); the paused-worker error test stays in the default run
@pytest.mark.timeout(120)
def test_worker_resumed_before_the_wait_fit_completes(small_cluster):
    """Paused when the fit starts, resumed 2 s later: the fit waits, then completes with
    the threaded scheduler's model."""
    X, y = slow_fit_data(n=2000, chunk=250)
    make = lambda: EncoderClassifier(kernels=("linear", "euclidean"))  # noqa: E731
    result = {}
    with (
        dask.config.set({NO_WORKERS_CONFIG: WAIT}),
        scalenc.connect(scheduler_file=small_cluster.scheduler_file, quiet=True) as client,
    ):
        small_cluster.worker_pids(client)
        warm_up(client)
        pause(client)
        fitter = fit_in_thread(make, X, y, result)
        end = time.monotonic() + 30
        while not waiting_tasks(client) and fitter.is_alive():
            assert time.monotonic() < end, "the fit sent no task"
            time.sleep(0.05)
        time.sleep(2.0)
        assert fitter.is_alive() and waiting_tasks(client) > 0, result
        assert worker_status(client) == "paused"
        resume(client)
        model = finish(fitter, result)
    with scalenc.connect("threads"):
        ref = make().fit(X, y)
        got, want = outputs(model, X), outputs(ref, X)
    assert_same_model(model, ref, rtol=1e-12)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.slow  # 15 s of pauses on its own cluster; the other two pause tests stay in the default run
@pytest.mark.timeout(120)
def test_clock_restarts_when_the_worker_resumes(slow_small_cluster):
    """Paused twice for PAUSED_FOR s within one pass (one ``compute``), running 1 s in
    between: longer than the wait without a running worker in all, but never as long in
    a row, so the fit completes — with the threaded scheduler's model."""
    procs = slow_small_cluster
    X, y = slow_fit_data(n=4000, chunk=250)  # pass 2: 16 blocks of 0.25 s on one worker
    make = lambda: EncoderClassifier(kernels=(slow_linear,))  # noqa: E731
    result = {}
    with (
        dask.config.set({NO_WORKERS_CONFIG: RESTART_WAIT}),
        scalenc.connect(scheduler_file=procs.scheduler_file, quiet=True) as client,
    ):
        procs.worker_pids(client)
        fitter = fit_in_thread(make, X, y, result)
        procs.wait_for_kernel_call()  # pass 2 runs on the worker
        for _ in range(2):
            pause(client)
            time.sleep(PAUSED_FOR)
            assert fitter.is_alive(), result
            resume(client)
            time.sleep(1.0)  # running: the watchdog sees it (it looks every 0.1-0.5 s)
        model = finish(fitter, result)
    with scalenc.connect("threads"):  # the kernel is slow on the worker only
        ref = make().fit(X, y)
        got, want = outputs(model, X), outputs(ref, X)
    assert_same_model(model, ref, rtol=1e-12)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, err_msg=name)
