"""Fits on a cluster whose workers are killed mid-fit (pre-emption): a fit with a checkpoint
resumes from it by itself and gives the threaded fit's model; a task that exceeds its
worker's memory stops at once with a clear error; a fit without a checkpoint says what
would have kept its work (:mod:`scalenc.engine.resume`).

The cluster is real: a ``dask scheduler`` and ``dask worker`` processes with their nannies
on 127.0.0.1, started here, whose block tasks are slowed down by a preloaded module
(``tests/_slow_blocks.py``) so that a fit is still running when a worker is SIGKILLed with
its nanny. The scheduler runs with ``distributed.scheduler.allowed-failures`` 0, so that
one dead worker makes Dask give up on the task it was running (``KilledWorker``), as four
do by default: what a cluster whose workers keep being pre-empted does to a long fit.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import psutil
import pytest
from conftest import make_blobs
from test_cluster import DASK, ROOT, assert_same_model, scalenc_command

import scalenc
from scalenc import EncoderClassifier, NRBFNClassifier
from scalenc.engine import resume
from scalenc.exceptions import MemoryBudgetError, WorkersKilledError

pytestmark = pytest.mark.cluster

#: Every block's partial saved in the checkpoint (blocks here are short).
SAVE_ALL = {"scalenc.checkpoint.min-seconds": 0.0, "scalenc.checkpoint.write-share": 1e12}


class NannyCluster:
    """A scheduler (``allowed-failures`` 0) and workers with nannies, started here."""

    def __init__(
        self, root: Path, *, sleep: float = 0.2, hog: int = 0, memory: str = "1GB", fatal=""
    ):
        self.root, self.sleep, self.hog, self.memory = root, sleep, hog, memory
        self.fatal = fatal
        root.mkdir(parents=True, exist_ok=True)
        self.markers = root / "markers"
        self.markers.mkdir(exist_ok=True)
        self.scheduler_file = root / "scheduler.json"
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self._logs = []

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
        env.update(
            DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0",
            SCALENC_TEST_BLOCK_SLEEP=str(self.sleep),
            SCALENC_TEST_BLOCK_HOG=str(self.hog),
            SCALENC_TEST_MARKERS=str(self.markers),
            SCALENC_TEST_BLOCK_FATAL=str(self.fatal),
        )
        return env

    def _popen(self, args, name):
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        proc = subprocess.Popen(
            [DASK, *args], stdout=log, stderr=subprocess.STDOUT, env=self._env(), cwd=self.root
        )
        self.procs.append(proc)
        return proc

    def start(self, n_workers: int = 2, port: int = 0) -> NannyCluster:
        self.start_scheduler(port)
        for _ in range(n_workers):
            self.add_worker()
        self.wait_for_workers(n_workers)
        return self

    def start_scheduler(self, port: int = 0) -> None:
        self.scheduler_file.unlink(missing_ok=True)
        self.scheduler = self._popen(
            [
                "scheduler", "--host", "127.0.0.1", "--port", str(port),
                "--dashboard-address", "127.0.0.1:0",
                "--scheduler-file", str(self.scheduler_file),
            ],
            f"scheduler{len(self.procs)}",
        )  # fmt: skip
        end = time.monotonic() + 60
        while not self.scheduler_file.exists():
            assert time.monotonic() < end, self.logs()
            time.sleep(0.1)
        time.sleep(0.2)

    def add_worker(self) -> subprocess.Popen:
        worker = self._popen(
            [
                "worker", "--scheduler-file", str(self.scheduler_file),
                "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0",
                "--nthreads", "1", "--memory-limit", self.memory,
                "--preload", "_slow_blocks",
            ],
            f"worker{len(self.workers)}",
        )  # fmt: skip
        self.workers.append(worker)
        return worker

    def address(self) -> str:
        return json.loads(self.scheduler_file.read_text())["address"]

    def wait_for_workers(self, n: int) -> None:
        import distributed

        with distributed.Client(scheduler_file=str(self.scheduler_file), timeout=30) as c:
            c.wait_for_workers(n, timeout=90)

    def kill_busy_worker(self, timeout: float = 90) -> int:
        """SIGKILL, with its nanny, a worker inside a block task; its PID."""
        end = time.monotonic() + timeout
        while not any(self.markers.iterdir()):
            assert time.monotonic() < end, f"no block task ran:\n{self.logs()}"
            time.sleep(0.05)
        pid = int(next(self.markers.iterdir()).name)
        nanny = next(w for w in self.workers if pid in {c.pid for c in _children(w.pid)})
        nanny.send_signal(signal.SIGKILL)  # the nanny first: it would start a new worker
        os.kill(pid, signal.SIGKILL)  # the worker process the nanny had started
        nanny.wait(timeout=30)
        return pid

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.root.glob("*.log"))
        )

    def close(self) -> None:
        for proc in reversed(self.procs):  # workers first, the scheduler last
            if proc.poll() is None:
                for child in _children(proc.pid):
                    child.terminate()
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
        for log in self._logs:
            log.close()


def _children(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.fixture
def cluster(tmp_path):
    procs = NannyCluster(tmp_path / "cluster")
    try:
        yield procs.start()
    finally:
        procs.close()


def blobs(n=4000, p=6, chunk=200):
    """20 blocks: at 0.2 s a block, a pass takes about 2 s on 2 workers."""
    X, y = make_blobs(n, p, 3, seed=5)
    return da.from_array(X, chunks=(chunk, p)), da.from_array(y, chunks=chunk)


def _fit_in_thread(make, X, y):
    result = {}

    def fit():
        try:
            result["model"] = make().fit(X, y)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=fit)
    thread.start()
    return thread, result


def test_a_worker_killed_with_its_nanny_mid_fit_resumes_to_the_threaded_model(
    cluster, tmp_path, caplog
):
    X, y = blobs(n=2000)  # 10 blocks: the kill comes in the first pass all the same
    checkpoint = str(tmp_path / "ck")
    make = lambda: EncoderClassifier(kernels=("linear", "euclidean"), checkpoint=checkpoint)  # noqa: E731
    with (
        scalenc.connect(scheduler_file=cluster.scheduler_file, quiet=True),
        dask.config.set(SAVE_ALL),
        caplog.at_level(logging.WARNING, logger="scalenc.engine.resume"),
    ):
        thread, result = _fit_in_thread(make, X, y)
        time.sleep(0.5)  # the first passes are running
        cluster.kill_busy_worker()
        thread.join(timeout=120)
        assert not thread.is_alive(), cluster.logs()
    assert "error" not in result, result["error"]
    model = result["model"]
    assert model.checkpoint_summary_["attempts"] == 2
    assert model.checkpoint_summary_["resumed"] is True
    lines = [r.getMessage() for r in caplog.records if r.name == "scalenc.engine.resume"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert (
        f"resuming from checkpoint {checkpoint} (attempt 2): the workers running task" in (lines[0])
    )
    assert "read back " in lines[0] and "; left: " in lines[0]
    with scalenc.connect("threads"):
        ref = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
        np.testing.assert_array_equal(model.predict(X), ref.predict(X))
    assert_same_model(model, ref, rtol=1e-12, ignore=("n_passes_",))
    assert not Path(checkpoint).exists()  # removed after the successful fit


def test_without_a_checkpoint_the_error_says_what_would_have_kept_the_work(cluster):
    X, y = blobs()
    with scalenc.connect(scheduler_file=cluster.scheduler_file, quiet=True):
        thread, result = _fit_in_thread(lambda: NRBFNClassifier(random_state=0), X, y)
        cluster.kill_busy_worker()
        thread.join(timeout=120)
    error = result.get("error")
    assert isinstance(error, WorkersKilledError), result
    assert type(error.__cause__).__name__ == "KilledWorker"
    message = str(error)
    assert "NRBFNClassifier's fit lost task" in message
    assert "The fit had no checkpoint, so the work it had done is lost" in message
    assert "checkpoint='DIR'" in message and "--checkpoint DIR" in message
    assert "distributed.scheduler.allowed-failures" in message and "now 0" in message


@pytest.mark.slow  # a nanny worker grown past its limit (20-40 s); the nanny-killed resume above stays in the default run
def test_a_task_over_its_memory_limit_stops_at_once_with_the_limit(tmp_path):
    procs = NannyCluster(tmp_path / "cluster", sleep=1.0, hog=600_000_000, memory="400MB")
    try:
        procs.start()
        X, y = blobs(n=1200, chunk=200)
        checkpoint = str(tmp_path / "ck")
        t0 = time.monotonic()
        with scalenc.connect(scheduler_file=procs.scheduler_file, quiet=True):
            with pytest.raises(MemoryBudgetError) as caught:
                NRBFNClassifier(random_state=0, checkpoint=checkpoint).fit(X, y)
        assert time.monotonic() - t0 < 60
    finally:
        procs.close()
    message = str(caught.value)
    assert "row block" in message
    assert "exceed its memory limit" in message and "of its 400 MB limit" in message
    assert "this is not pre-emption" in message
    assert f"The checkpoint {checkpoint} keeps the work done" in message
    assert "--memory-limit" in message and "chunk_rows=" in message
    assert type(caught.value.__cause__).__name__ == "KilledWorker"


@pytest.mark.slow  # 20-30 s: a nanny restarts each killed worker, up to 5 attempts
def test_a_block_that_kills_every_worker_it_runs_on_stops_without_a_loop(tmp_path):
    """No memory report from a nanny (the operating system killed the worker): the fit
    resumes while other blocks finish, then stops after 3 attempts that saved nothing."""
    X, y = blobs(n=1000, chunk=200)
    procs = NannyCluster(tmp_path / "cluster", sleep=0.05, fatal=800)  # the last block
    try:
        procs.start()
        checkpoint = str(tmp_path / "ck")
        t0 = time.monotonic()
        with (
            scalenc.connect(scheduler_file=procs.scheduler_file, quiet=True),
            dask.config.set(SAVE_ALL),
        ):
            with pytest.raises(WorkersKilledError) as caught:
                NRBFNClassifier(random_state=0, checkpoint=checkpoint).fit(X, y)
        assert time.monotonic() - t0 < 90
    finally:
        procs.close()
    message = str(caught.value)
    assert "attempts, the last 3 of which saved nothing new in its checkpoint" in message
    # the fatal block is 4, but Dask's KilledWorker may name another task the dying
    # worker held (CI once named row blocks 0 and 3; a loaded run, three reads of saved
    # groups once the fit resumed): each is named by what it was doing
    assert re.search(
        r"\((row block \d|a read of a group the checkpoint saved|a merge of a pass's "
        r"partials)\) died",
        message,
    ), message
    assert "each had a memory limit of 1 GB" in message and "dmesg" in message
    assert "The checkpoint keeps the work done" in message
    assert type(caught.value.__cause__).__name__ == "KilledWorker"


@pytest.mark.slow  # 30 s: the command's fit on a cluster, slowed, with a worker killed
def test_the_command_reports_each_resume_on_a_line_and_counts_the_attempts(cluster, tmp_path):
    X, y = make_blobs(4000, 6, 3, seed=5)
    store = tmp_path / "blobs.zarr"
    da.from_array(X, chunks=(500, 6)).to_zarr(str(store), component="X")
    da.from_array(y, chunks=500).to_zarr(str(store), component="y")
    checkpoint, summary = tmp_path / "ck", tmp_path / "summary.json"
    env = {
        **os.environ,
        "DASK_SCALENC__CHECKPOINT__MIN_SECONDS": "0",
        "DASK_SCALENC__CHECKPOINT__WRITE_SHARE": "1e12",
    }
    command = [
        *scalenc_command(), "fit", "nrbfn", "--data", str(store),
        "--model-out", str(tmp_path / "model"), "--checkpoint", str(checkpoint),
        "--set", "random_state=0", "--scheduler", cluster.address(),
        "--json", str(summary), "--progress", "lines",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        cluster.kill_busy_worker()
        cluster.add_worker()  # a replacement, as a pre-emptible pool starts one
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = stderr.decode()
    assert proc.returncode == 0, stderr
    lines = [line for line in stderr.splitlines() if "resuming from checkpoint" in line]
    assert len(lines) == 1, stderr
    assert re.search(
        r"scalenc fit: resuming from checkpoint \S+ \(attempt 2\): the workers running task .* "
        r"died; read back \d+ finished pass(es)? and \d+ saved groups? of row blocks; left: ",
        lines[0],
    ), lines[0]
    result = json.loads(summary.read_text())
    assert result["status"] == "ok"
    assert result["checkpoint"]["attempts"] == 2
    assert "after 2 attempts (lost tasks)" in stdout.decode()
    with scalenc.connect("threads"):
        model = scalenc.load_model(tmp_path / "model")
        ref = NRBFNClassifier(random_state=0).fit(X, y)
        np.testing.assert_array_equal(model.predict(X), ref.predict(X))
        np.testing.assert_allclose(model.decision_function(X), ref.decision_function(X), rtol=1e-9)


def test_the_checkpoint_says_what_it_holds_and_what_is_left(tmp_path):
    """What a resume's line reports: finished passes, saved groups, and the blocks of the
    pass that was cut off that no saved group covers (tree of fan-in 2 over 5 blocks)."""
    from scalenc.engine.checkpoint import CheckpointRun
    from scalenc.engine.checkpoint_files import encode

    run = CheckpointRun(tmp_path / "ck", {"x": 1}).open()
    assert run.saved() == frozenset()
    done = run.plan_pass("p1", 5, 2)
    run.fs.pipe_file(done.result_path, encode(1))
    plan = run.plan_pass("p2", 5, 2)
    for level, index in [(1, 0), (0, 4)]:  # blocks 0-1 and block 4
        run.fs.pipe_file(plan.node_path(level, index), encode(1))
    run.fs.pipe_file(plan.node_path(0, 3) + ".tmp-1-abc", b"cut off")  # never counted
    saved = run.saved()
    assert saved == {"passes/p1/result", "passes/p2/node-1-0", "passes/p2/node-0-4"}
    held, left = run.describe(saved)
    assert held == "1 finished pass and 2 saved groups of row blocks"
    assert left == "2 of 5 row blocks of the pass that was cut off, and the passes after it"


def test_the_text_summary_counts_the_attempts():
    from scalenc.cli.summary import _checkpoint

    summary = {"path": "ck", "resumed": True, "passes_reused": 1, "groups_reused": 2}
    assert "resumed after 3 attempts (lost tasks), 1 finished pass" in _checkpoint(
        {**summary, "attempts": 3}
    )
    assert _checkpoint({**summary, "attempts": 1}).startswith("checkpoint ck: resumed, 1 finished")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # 20-40 s: the client and the workers reconnect to a new scheduler
def test_a_scheduler_lost_and_restarted_at_its_address_is_resumed_from(tmp_path, caplog):
    port = _free_port()
    procs = NannyCluster(tmp_path / "cluster")
    X, y = blobs()
    checkpoint = str(tmp_path / "ck")
    make = lambda: EncoderClassifier(kernels=("linear", "euclidean"), checkpoint=checkpoint)  # noqa: E731
    try:
        procs.start(port=port)
        with (
            scalenc.connect(scheduler_file=procs.scheduler_file, quiet=True),
            dask.config.set(SAVE_ALL),
            caplog.at_level(logging.WARNING, logger="scalenc.engine.resume"),
        ):
            thread, result = _fit_in_thread(make, X, y)
            time.sleep(1.5)
            for marker in procs.markers.iterdir():
                marker.unlink()
            while not any(procs.markers.iterdir()):  # a block task is running now
                time.sleep(0.02)
            procs.scheduler.send_signal(signal.SIGKILL)
            procs.scheduler.wait(timeout=30)
            procs.start_scheduler(port)  # the same address: the client reconnects
            for _ in range(2):  # workers end with their scheduler: a supervisor restarts them
                procs.add_worker()
            thread.join(timeout=180)
            assert not thread.is_alive(), procs.logs()
    finally:
        procs.close()
    assert "error" not in result, f"{result['error']}\n{procs.logs()}"
    model = result["model"]
    assert model.checkpoint_summary_["attempts"] == 2
    (line,) = [r.getMessage() for r in caplog.records if r.name == "scalenc.engine.resume"]
    assert "(attempt 2): the connection to the Dask scheduler was lost; read back" in line
    with scalenc.connect("threads"):
        ref = EncoderClassifier(kernels=("linear", "euclidean")).fit(X, y)
    assert_same_model(model, ref, rtol=1e-12, ignore=("n_passes_",))


def test_a_resumed_attempt_saves_every_block_worth_its_write():
    """From the second attempt on, a group needs no 2 s of work to be saved (the next loss
    may come sooner); the first attempt keeps the configured rule."""
    from scalenc.engine.checkpoint import checkpoint_settings

    with dask.config.set({"scalenc.checkpoint.min-seconds": 3.0}):
        with resume._saving_more(1):
            assert checkpoint_settings()["rule"][0] == 3.0
        with resume._saving_more(2):
            assert checkpoint_settings()["rule"][0] == resume.RESUMED_MIN_SECONDS == 0.0
        assert checkpoint_settings()["rule"][0] == 3.0


def test_a_lost_task_is_named_by_what_it_was_doing():
    """The tasks a dying worker may take down with the block that killed it, as the
    error names them: a row block, a read of a saved group, a merge of partials."""
    text = resume._task_text
    assert text(("timed_block-0a1b2c", 4, 0)) == "('timed_block-0a1b2c', 4, 0) (row block 4)"
    assert text("load_node-b80ae2a4-5b26-4785-946a-b8d9866c0a56") == (
        "'load_node-b80ae2a4-5b26-4785-946a-b8d9866c0a56' (a read of a group the checkpoint saved)"
    )
    assert text("combine_node-29689814-1aee-40b4-beec-31745fb44c34").endswith(
        "(a merge of a pass's partials)"
    )
    assert text("finalize-5f3a") == "'finalize-5f3a'"
