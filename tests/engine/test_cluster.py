"""scalenc on real clusters: `dask scheduler` and `dask worker` processes on 127.0.0.1.

Every test here starts its processes itself (scheduler file in tmp_path, ``--port 0``,
dashboards on 127.0.0.1:0, workers with one thread and no nanny so that the PID the test
started is the worker), and always terminates them. Against them:

* fits through :func:`scalenc.connect` equal the threaded scheduler's, on the same
  chunking and on another one (every method);
* the ``scalenc`` command with ``--scheduler tcp://...``;
* a worker SIGKILLed mid-fit: the fit completes with the same model;
* the scheduler SIGKILLed mid-fit: :class:`ClusterUnavailableError` (library), exit
  code 3 and no complete-looking output (CLI);
* TLS with certificates made by ``deploy/tls/make-certs.sh``: connects with them,
  refused without them.

The deploy/ files (compose, Kubernetes, SSH, SLURM, TLS) are parsed and checked here too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

import scalenc
from scalenc import CCDR, CCDRClassifier, EncoderClassifier, LRClassifier, NRBFNClassifier
from scalenc.cli import build_parser
from scalenc.cli.jobs import read_job, step_argv
from scalenc.engine.cluster import ClusterUnavailableError, active_client
from scalenc.engine.connect import make_security

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
DASK = str(BIN / "dask") if (BIN / "dask").exists() else shutil.which("dask")
SLOW_ENV = "SCALENC_TEST_SLOW_KERNEL"  # seconds a slow_linear call sleeps; set on workers only
MARKER_ENV = "SCALENC_TEST_MARKERS"  # where slow_linear notes the PIDs of workers calling it


# --- estimators --------------------------------------------------------------------------

METHODS = {
    # name: (class, constructor arguments, CLI method name)
    "encoder": (
        EncoderClassifier,
        {"kernels": ("linear", "euclidean", "spearman")},
        "encoder",
    ),
    "encoder-linear": (EncoderClassifier, {"kernels": ("linear",)}, None),
    "nrbfn": (NRBFNClassifier, {"n_neighbors": 7, "alpha": 1e-9}, "nrbfn"),
    "lrc": (LRClassifier, {}, "lrc"),
    "ccdr": (CCDRClassifier, {"n_neighbors": 8}, "ccdr-classifier"),
    "ccdr-transformer": (CCDR, {"n_neighbors": 8}, "ccdr"),
}


def make_estimator(method: str):
    """A fresh estimator for ``method``."""
    cls, kwargs, _ = METHODS[method]
    est = cls(**kwargs)
    if "random_state" in est.get_params():
        est.set_params(random_state=0)
    return est


def fitted_arrays(model) -> dict[str, np.ndarray]:
    """The numeric public fitted attributes (names ending in ``_``)."""
    out = {}
    for name, value in vars(model).items():
        if not name.endswith("_") or name.startswith("_"):
            continue
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            value = np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = value
    return out


# Not the model: pass counts may depend on the number of chunks, and nRBFN's numerical rank
# of W̃ (a threshold count) can flip by one with the rounding of another summation order.
BOOKKEEPING = {"n_passes_", "rank_"}


def assert_same_model(model, ref, *, rtol, ignore=()):
    got, want = fitted_arrays(model), fitted_arrays(ref)
    for name in ignore:
        got.pop(name, None)
        want.pop(name, None)
    assert got.keys() == want.keys()
    for name, value in want.items():
        if value.dtype.kind in "biu":
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            scale = (
                float(np.nanmax(np.abs(value))) if value.size and not np.isnan(value).all() else 1.0
            )
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=rtol * scale, err_msg=name)


def outputs(model, X) -> dict[str, np.ndarray]:
    """predict, predict_proba, decision_function, transform (those the model has),
    computed on the active scheduler."""
    return {
        name: _computed(getattr(model, name)(X))
        for name in ("predict", "predict_proba", "decision_function", "transform")
        if hasattr(model, name)
    }


def _computed(value) -> np.ndarray:
    return np.asarray(value.compute() if hasattr(value, "compute") else value)


def assert_same_outputs(got, want, *, rtol):
    assert got.keys() == want.keys()
    if "predict" in want:
        np.testing.assert_array_equal(got["predict"], want["predict"])
    for name in want.keys() - {"predict"}:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=1e-9, err_msg=name)


def fit_threaded(method, X, y):
    with scalenc.connect("threads"):
        model = make_estimator(method).fit(X, y)
        return model, outputs(model, X)


# --- a slow kernel, so that a fit is still running when a process is killed --------------


def slow_linear(X, U):
    """The linear kernel X Uᵀ, sleeping ``$SCALENC_TEST_SLOW_KERNEL`` seconds per block.

    Workers import it from this module (their PYTHONPATH holds tests/); only they have the
    variable set, so the threaded reference fit runs at full speed.
    """
    markers = os.environ.get(MARKER_ENV)
    if markers:  # tell the test which worker process is inside a kernel call right now
        Path(markers, str(os.getpid())).touch()
    time.sleep(float(os.environ.get(SLOW_ENV, "0")))
    return X @ U.T


# --- real dask processes ---------------------------------------------------------------


class DaskProcesses:
    """A ``dask scheduler`` and workers started as subprocesses on 127.0.0.1."""

    def __init__(
        self, root: Path, n_workers: int = 2, *, tls_dir: Path | None = None, slow: float = 0.0
    ):
        self.root, self.n_workers, self.tls_dir, self.slow = root, n_workers, tls_dir, slow
        self.root.mkdir(parents=True, exist_ok=True)
        self.scheduler_file = root / "scheduler.json"
        self.markers = root / "markers"
        self.markers.mkdir(exist_ok=True)
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._logs = []

    # process plumbing
    def _popen(self, args, name, env=None):
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root)

    def _tls_args(self, role):
        if self.tls_dir is None:
            return []
        d = self.tls_dir
        return [
            "--tls-ca-file",
            str(d / "ca.pem"),
            "--tls-cert",
            str(d / f"{role}.pem"),
            "--tls-key",
            str(d / f"{role}-key.pem"),
        ]

    def _env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "tests"), str(Path(__file__).resolve().parent), str(ROOT)]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        # what a nanny would set: one BLAS thread per worker thread
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        env[SLOW_ENV] = str(self.slow)
        env[MARKER_ENV] = str(self.markers)
        return env

    def wait_for_kernel_call(self, timeout=60.0) -> subprocess.Popen:
        """The worker process that is inside a ``slow_linear`` call (pass 2 is running)."""
        self._wait(lambda: any(self.markers.iterdir()), "a slow_linear call", timeout)
        pid = int(next(self.markers.iterdir()).name)
        return next(p for p in self.workers if p.pid == pid)

    def start(self):
        protocol = ["--protocol", "tls"] if self.tls_dir else []
        self.scheduler = self._popen(  # the scheduler unpickles the graph: same PYTHONPATH
            [
                DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                *protocol,
                "--dashboard-address",
                "127.0.0.1:0",
                "--scheduler-file",
                str(self.scheduler_file),
                *self._tls_args("scheduler"),
            ],
            "scheduler",
            env=self._env(),
        )
        self._wait(lambda: self.scheduler_file.exists(), "the scheduler file")
        time.sleep(0.2)  # the file is written before the listener is fully up
        for i in range(self.n_workers):
            self.workers.append(
                self._popen(
                    [
                        DASK,
                        "worker",
                        "--scheduler-file",
                        str(self.scheduler_file),
                        "--host",
                        "127.0.0.1",
                        "--dashboard-address",
                        "127.0.0.1:0",
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--death-timeout",
                        "60",
                        "--memory-limit",
                        "2GB",
                        "--name",
                        f"w{i}",
                        *self._tls_args("worker"),
                    ],
                    f"worker{i}",
                    env=self._env(),
                )
            )
        self.wait_for_workers(self.n_workers)
        return self

    def _wait(self, condition, what, timeout=90.0):
        end = time.monotonic() + timeout
        while not condition():
            for p in [self.scheduler, *self.workers]:
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"a dask process exited early:\n{self.logs()}")
            if time.monotonic() > end:
                raise TimeoutError(f"waited {timeout} s for {what}:\n{self.logs()}")
            time.sleep(0.1)

    def client(self):
        import distributed

        sec = make_security(self.tls_dir.as_posix() if self.tls_dir else None)
        return distributed.Client(self.address, security=sec, timeout=30, set_as_default=False)

    def wait_for_workers(self, n):
        with self.client() as c:
            c.wait_for_workers(n, timeout=90)

    @property
    def address(self) -> str:
        return json.loads(self.scheduler_file.read_text())["address"]

    def worker_pids(self, client) -> dict[str, int]:
        """Worker address → PID, checked against the processes this object started."""
        pids = client.run(os.getpid)
        started = {p.pid for p in self.workers}
        assert set(pids.values()) <= started, (pids, started)
        return pids

    def kill(self, proc: subprocess.Popen):
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def logs(self) -> str:
        text = []
        for path in sorted(self.root.glob("*.log")):
            text.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(text)

    def close(self):
        # the workers first, then the scheduler: a nanny-less worker terminated at the
        # same moment as its scheduler sometimes hung in its own close until killed
        for group in ([p for p in self.workers if p is not None], [self.scheduler]):
            procs = [p for p in group if p is not None]
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=15)
        for log in self._logs:
            log.close()


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory):
    """A scheduler and two workers for the whole module (tests must not kill them)."""
    procs = DaskProcesses(tmp_path_factory.mktemp("cluster"))
    try:
        yield procs.start()
    finally:
        procs.close()


@pytest.fixture
def fresh_processes(tmp_path):
    """A scheduler and two (slow-kernel) workers of one test's own, to kill."""
    procs = DaskProcesses(tmp_path / "cluster", slow=0.25)
    try:
        yield procs.start()
    finally:
        procs.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A Zarr group (X float64 3000×8, 3 overlapping classes, y with 10 % unlabeled) in row
    chunks of 400."""
    path = tmp_path_factory.mktemp("data") / "blobs.zarr"
    X, y = make_blobs(3000, 8, 3, seed=21, sep=0.7, unlabeled=0.1)
    da.from_array(X, chunks=(400, 8)).to_zarr(str(path), component="X")
    da.from_array(y, chunks=400).to_zarr(str(path), component="y")
    return path


def wait_for_processing(client, match: str, *, on=None, timeout=60.0) -> str:
    """Poll the scheduler until a task whose key contains ``match`` is processing
    (on worker ``on`` if given); return that worker's address."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for worker, keys in client.processing().items():
            if (on is None or worker == on) and any(match in str(k) for k in keys):
                return worker
        time.sleep(0.02)
    raise TimeoutError(f"no task matching {match!r} was processing within {timeout} s")


# --- connect ---------------------------------------------------------------------------


def test_connect_default_is_threads(monkeypatch):
    monkeypatch.delenv("SCALENC_SCHEDULER", raising=False)
    monkeypatch.delenv("SCALENC_SCHEDULER_FILE", raising=False)
    with scalenc.connect() as client:
        assert client is None
        assert dask.config.get("scheduler") == "threads"


def test_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(
        ClusterUnavailableError,
        match=r"Cannot use the Dask scheduler at "
        r"tcp://127\.0\.0\.1:1: .*Check that the scheduler is running",
    ):
        with scalenc.connect("tcp://127.0.0.1:1", timeout=2, quiet=True):
            pass


def test_missing_scheduler_file(tmp_path):
    with pytest.raises(
        ClusterUnavailableError, match=r"scheduler file .*nope\.json does not exist"
    ):
        with scalenc.connect(scheduler_file=tmp_path / "nope.json"):
            pass


def test_bad_address_and_security_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"Cannot tell a Dask scheduler from 'nonsense'"):
        with scalenc.connect("nonsense"):
            pass
    with pytest.raises(ValueError, match=r"Unknown scheduler protocol 'http'"):
        with scalenc.connect("http://127.0.0.1:8786"):
            pass
    with pytest.raises(ValueError, match=r"lacks .*ca\.pem"):
        make_security(tmp_path)
    with pytest.raises(ValueError, match=r"security\['tls_ca_file'\] = .* is not a file"):
        make_security({"ca_file": tmp_path / "ca.pem"})


def test_env_scheduler_and_dashboard_on_loopback(dask_processes, monkeypatch, capsys):
    monkeypatch.setenv("SCALENC_SCHEDULER", dask_processes.address)
    with scalenc.connect() as client:
        assert active_client() is client
        assert client.scheduler.address == dask_processes.address
        assert len(client.nthreads()) == 2
    assert active_client() is None
    link = re.search(r"dashboard (\S+)", capsys.readouterr().err).group(1)
    assert link.startswith("http://127.0.0.1:"), link


def test_local_cluster_binds_loopback():
    with scalenc.connect("local", n_workers=1, threads_per_worker=1, quiet=True) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        workers = client.scheduler_info()["workers"]
        assert all(addr.startswith("tcp://127.0.0.1:") for addr in workers)
        X, y = make_blobs(500, 4, 3, seed=3)
        model = make_estimator("encoder").fit(da.from_array(X, chunks=(120, 4)), y)
    ref, _ = fit_threaded("encoder", X, y)
    assert_same_model(model, ref, rtol=1e-9)


# --- the same model wherever it runs ----------------------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
def test_fit_predict_on_cluster_equals_threads(method, dask_processes, store):
    X, y = scalenc.load(store)
    with scalenc.connect(scheduler_file=dask_processes.scheduler_file, quiet=True) as client:
        assert client is not None and len(client.nthreads()) == 2
        model = make_estimator(method).fit(X, y)
        got = outputs(model, X)
    ref, want = fit_threaded(method, X, y)
    assert_same_model(model, ref, rtol=1e-9)
    assert_same_outputs(got, want, rtol=1e-9)
    X2, y2 = scalenc.load(store, chunk_rows=700)  # another chunking
    assert X2.chunks[0] != X.chunks[0]
    ref2, want2 = fit_threaded(method, X2, y2)
    assert_same_model(model, ref2, rtol=1e-6, ignore=BOOKKEEPING)
    assert_same_outputs(got, want2, rtol=1e-6)


# --- the command line ---------------------------------------------------------------------


def scalenc_command() -> list[str]:
    exe = BIN / "scalenc"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from scalenc.cli import main; sys.exit(main())"]


def set_options(method) -> list[str]:
    """``--set PARAM=VALUE`` for the arguments :func:`make_estimator` uses."""
    args = []
    for name, value in make_estimator(method).get_params().items():
        if name in METHODS[method][1] or (name == "random_state" and value is not None):
            text = ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
            args += ["--set", f"{name}={text}"]
    return args


def run_cli(*args, timeout=300, **kwargs):
    return subprocess.run(
        [*scalenc_command(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def read_predictions(path: Path) -> np.ndarray:
    import zarr

    node = zarr.open(str(path), mode="r")
    if hasattr(node, "shape"):
        return node[...]
    arrays = dict(node.arrays())
    return next(iter(arrays.values()))[...]


@pytest.mark.parametrize(
    "method",
    [
        # the command on a running cluster, 10-20 s each: CI's slow run (the library's
        # fit on a cluster, test_fit_predict_on_cluster_equals_threads, stays in the default)
        pytest.param(m, marks=pytest.mark.slow)
        for m, spec in METHODS.items()
        if spec[2]
    ],
)
def test_cli_fit_predict_with_scheduler(method, dask_processes, store, tmp_path):
    command = scalenc_command()
    model_dir, pred = tmp_path / "model", tmp_path / "pred.zarr"
    cli_name = METHODS[method][2]
    fit = run_cli(
        "fit",
        cli_name,
        "--data",
        store,
        "--model-out",
        model_dir,
        *set_options(method),
        "--scheduler",
        dask_processes.address,
    )
    assert fit.returncode == 0, (command, fit.stdout, fit.stderr)
    X, y = scalenc.load(store)
    _, want = fit_threaded(method, X, y)
    command = "predict" if "predict" in want else "embed"  # CCDR is a transformer
    out = run_cli(
        command,
        "--model",
        model_dir,
        "--data",
        store,
        "--out",
        pred,
        "--scheduler",
        dask_processes.address,
    )
    assert out.returncode == 0, (out.stdout, out.stderr)
    if command == "predict":
        np.testing.assert_array_equal(read_predictions(pred).ravel(), want["predict"])
    else:
        np.testing.assert_allclose(
            read_predictions(pred),
            want["transform"],
            rtol=1e-9,
            atol=1e-9 * np.abs(want["transform"]).max(),
        )


# --- processes lost mid-fit ----------------------------------------------------------------


def slow_fit_data(n=6000, p=6, chunk=250):
    """24 blocks: with the slow kernel (0.25 s per block) a pass takes ~3 s on 2 workers."""
    X, y = make_blobs(n, p, 3, seed=5, unlabeled=0.05)
    return da.from_array(X, chunks=(chunk, p)), da.from_array(y, chunks=chunk)


@pytest.mark.slow  # a worker killed mid-fit: test_cluster_churn's nanny-killed resume checks the same model in the default run
def test_worker_killed_mid_fit_same_model(fresh_processes):
    X, y = slow_fit_data()
    make = lambda: EncoderClassifier(kernels=(slow_linear,))  # noqa: E731
    with scalenc.connect(scheduler_file=fresh_processes.scheduler_file, quiet=True) as client:
        fresh_processes.worker_pids(client)  # the workers are the processes started here
        result = {}
        fitter = threading.Thread(target=lambda: result.setdefault("model", make().fit(X, y)))
        fitter.start()
        victim = fresh_processes.wait_for_kernel_call()  # pass 2 is running on it
        fresh_processes.kill(victim)  # SIGKILL, by the PID this test started
        fitter.join(timeout=180)
        assert not fitter.is_alive(), "the fit did not finish after a worker was killed"
        assert victim.returncode == -signal.SIGKILL
        assert len(client.nthreads()) == 1
        model = result["model"]
    with scalenc.connect("threads"):  # predictions here: the slow kernel is slow on workers only
        got = outputs(model, X)
        ref = make().fit(X, y)
        want = outputs(ref, X)
    assert_same_model(model, ref, rtol=1e-12)
    assert_same_outputs(got, want, rtol=1e-12)


def test_scheduler_killed_mid_fit_is_a_clear_error(fresh_processes):
    X, y = slow_fit_data()
    with scalenc.connect(scheduler_file=fresh_processes.scheduler_file, quiet=True):
        killer = threading.Thread(
            target=lambda: (
                fresh_processes.wait_for_kernel_call(),
                fresh_processes.kill(fresh_processes.scheduler),
            )
        )
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(
            ClusterUnavailableError,
            match=r"Lost the connection to the Dask scheduler at tcp://127\.0\.0\.1",
        ):
            EncoderClassifier(kernels=(slow_linear,)).fit(X, y)
        killer.join(timeout=60)
        assert time.monotonic() - t0 < 60


@pytest.mark.slow  # 6 s of processes; the API test of a killed scheduler stays in the default run
def test_cli_scheduler_killed_mid_fit(fresh_processes, tmp_path):
    """The CLI exits with the cluster code (3) and leaves no model that looks complete."""
    command = scalenc_command()
    # slow enough on 2 workers: many blocks and three kernels (three passes)
    path = tmp_path / "big.zarr"
    X, y = make_blobs(200_000, 20, 3, seed=8)
    da.from_array(X, chunks=(1000, 20)).to_zarr(str(path), component="X")
    da.from_array(y, chunks=1000).to_zarr(str(path), component="y")
    model_dir = tmp_path / "model"
    proc = subprocess.Popen(
        [
            *command,
            "fit",
            "encoder",
            "--data",
            str(path),
            "--model-out",
            str(model_dir),
            "--set",
            "kernels=linear,euclidean,spearman",
            "--scheduler",
            fresh_processes.address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with fresh_processes.client() as watcher:
            try:
                wait_for_processing(watcher, "", timeout=120)
            except TimeoutError:
                pytest.fail(f"the CLI never ran a task: {proc.communicate(timeout=60)}")
            fresh_processes.kill(fresh_processes.scheduler)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, (stdout, stderr)
    assert "scheduler" in stderr.lower()
    assert not model_dir.exists() or not any(model_dir.iterdir()), list(model_dir.iterdir())


# --- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        ["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(out / "good")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(out / "other")],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def tls_processes(tmp_path_factory, certs):
    """A TLS scheduler and one worker for the module's TLS tests (they must not kill them)."""
    procs = DaskProcesses(tmp_path_factory.mktemp("tls"), n_workers=1, tls_dir=certs / "good")
    try:
        yield procs.start()
    finally:
        procs.close()


def test_tls_with_and_without_certificates(tls_processes, certs):
    address = tls_processes.address
    assert address.startswith("tls://127.0.0.1:")
    X, y = make_blobs(800, 5, 3, seed=9)
    Xd = da.from_array(X, chunks=(200, 5))
    with scalenc.connect(address, security=certs / "good", quiet=True) as client:
        model = make_estimator("encoder").fit(Xd, y)
        pred = model.predict(Xd).compute()
        assert client.dashboard_link.startswith("http://127.0.0.1:")
    ref, want = fit_threaded("encoder", Xd, y)
    np.testing.assert_array_equal(pred, want["predict"])

    with pytest.raises(ClusterUnavailableError, match=r"speaks TLS, but no certificates"):
        with scalenc.connect(address, timeout=5):
            pass
    with pytest.raises(ClusterUnavailableError, match=r"requires TLS and refused our credentials"):
        with scalenc.connect(address, security=certs / "other", timeout=5):
            pass
    with pytest.raises(ClusterUnavailableError, match=r"if it uses TLS, connect with tls://"):
        with scalenc.connect(address.replace("tls://", "tcp://"), timeout=5):
            pass


@pytest.mark.slow  # a TLS cluster for the command; test_tls_with_and_without_certificates stays in the default run
def test_cli_tls_through_dask_settings(tls_processes, certs, store, tmp_path):
    """deploy/tls/README.md: the command line takes its certificates from Dask's settings."""
    command = scalenc_command()
    good = certs / "good"
    env = {
        **os.environ,
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "true",
        "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(good / "ca.pem"),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(good / "client.pem"),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(good / "client-key.pem"),
    }
    fit = run_cli(
        "fit",
        "encoder",
        "--data",
        store,
        "--model-out",
        tmp_path / "m",
        "--scheduler",
        tls_processes.address,
        env=env,
    )
    assert fit.returncode == 0, (command, fit.stdout, fit.stderr)
    refused = run_cli(
        "fit",
        "encoder",
        "--data",
        store,
        "--model-out",
        tmp_path / "m2",
        "--scheduler",
        tls_processes.address,
        "--connect-timeout",
        "5",
    )
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "TLS" in refused.stderr
    assert not (tmp_path / "m2").exists()


# --- deploy/: files parsed and checked (no container engine runs here) ---------------------


def yaml_docs(path: Path) -> list:
    yaml = pytest.importorskip("yaml")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def option(args: list, name: str):
    """The value following ``name`` in an argument list."""
    assert name in args, (name, args)
    return args[args.index(name) + 1]


def bash_blocks(readme: Path) -> str:
    return "\n".join(re.findall(r"```bash\n(.*?)```", readme.read_text(), re.S))


def check_cli_accepts(argv: list[str]):
    """The `scalenc` command line parses."""
    assert argv[0] == "scalenc"
    build_parser().parse_args(argv[1:])


def test_deploy_job_file_runs_with_the_cli():
    job = read_job(DEPLOY / "jobs" / "job.toml")
    assert str(job.workdir) == "/data/scalenc-job"
    assert "scheduler" not in job.settings  # given by each deployment, not the file
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    commands = []
    for step in job.steps:
        argv = step_argv(step, sub.choices[step.command], job.defaults)
        parser.parse_args([step.command, *argv])
        commands.append(step.command)
    assert commands == ["make-data", "make-data", "fit", "predict", "evaluate"]


def test_dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+", text, re.M)
    for src in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for item in src.split():
            assert (ROOT / item).exists(), item
    assert re.search(r"^RUN pip install \. ", text, re.M)
    assert re.search(r"^USER scalenc$", text, re.M)  # not root
    assert "OMP_NUM_THREADS=1" in text


def test_docker_compose():
    (compose,) = yaml_docs(DEPLOY / "docker-compose.yml")
    services = compose["services"]
    assert set(services) == {"scheduler", "worker", "runner"}
    for name, svc in services.items():
        assert svc["image"] == "scalenc:latest", name
        assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)  # loopback only
    assert compose["networks"]["dask"]["internal"] is True
    for name in ("worker", "runner"):
        assert services[name]["networks"] == ["dask"]
        assert "ports" not in services[name]

    scheduler = services["scheduler"]["command"]
    assert scheduler[:2] == ["dask", "scheduler"] and option(scheduler, "--port") == "8786"
    assert option(scheduler, "--dashboard-address") == ":8787"
    assert services["scheduler"]["ports"] == ["127.0.0.1:8787:8787"]
    assert "service_healthy" in str(services["runner"]["depends_on"])

    worker = services["worker"]["command"]
    assert worker[:3] == ["dask", "worker", "tcp://scheduler:8786"]
    assert option(worker, "--dashboard-address").startswith("127.0.0.1:")
    assert services["worker"]["deploy"]["replicas"] >= 2

    runner = services["runner"]
    assert runner["command"][:3] == ["scalenc", "run", "/jobs/job.toml"]
    assert runner["environment"]["SCALENC_SCHEDULER"] == "tcp://scheduler:8786"
    check_cli_accepts(runner["command"])
    assert "./jobs:/jobs:ro" in runner["volumes"] and (DEPLOY / "jobs" / "job.toml").is_file()
    for name in ("worker", "runner"):
        assert "data:/data" in services[name]["volumes"]
    assert "data" in compose["volumes"]

    readme = bash_blocks(DEPLOY / "README.md")
    assert "docker compose -f deploy/docker-compose.yml up --build" in readme
    assert "--exit-code-from runner" in readme
    assert option(runner["command"], "--json") == "/data/summary.json"
    text = (DEPLOY / "README.md").read_text()
    assert "/data/summary.json" in text and "http://127.0.0.1:8787" in text
    assert "--scale worker=" in text


def test_docker_compose_tls_override():
    (tls,) = yaml_docs(DEPLOY / "docker-compose.tls.yml")
    made = {
        "ca.pem",
        "scheduler.pem",
        "scheduler-key.pem",
        "worker.pem",
        "worker-key.pem",
        "client.pem",
        "client-key.pem",
    }  # what make-certs.sh writes
    scheduler = tls["services"]["scheduler"]["command"]
    assert option(scheduler, "--protocol") == "tls"
    worker = tls["services"]["worker"]["command"]
    assert worker[2] == "tls://scheduler:8786"
    for args, role in ((scheduler, "scheduler"), (worker, "worker")):
        assert option(args, "--tls-cert") == f"/certs/{role}.pem"
        assert option(args, "--tls-key") == f"/certs/{role}-key.pem"
        assert option(args, "--tls-ca-file") == "/certs/ca.pem"
    env = tls["services"]["runner"]["environment"]
    assert env["SCALENC_SCHEDULER"] == "tls://scheduler:8786"
    files = {Path(v).name for k, v in env.items() if k.startswith("DASK_DISTRIBUTED__COMM__TLS")}
    assert files == {"ca.pem", "client.pem", "client-key.pem"} and files <= made
    for svc in tls["services"].values():
        assert "./certs:/certs:ro" in svc["volumes"]
    assert "deploy/tls/make-certs.sh deploy/certs" in bash_blocks(DEPLOY / "README.md")


def containers(pod_spec: dict) -> list[dict]:
    assert not pod_spec.get("hostNetwork"), "no host networking"
    out = pod_spec["containers"]
    for c in out:
        assert all("hostPort" not in p for p in c.get("ports", [])), c["name"]
    return out


def test_kubernetes_daskjob():
    docs = yaml_docs(DEPLOY / "kubernetes" / "daskjob.yaml")
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"NetworkPolicy", "DaskJob"}
    job = kinds["DaskJob"]
    assert job["apiVersion"] == "kubernetes.dask.org/v1"
    name = job["metadata"]["name"]
    (runner,) = containers(job["spec"]["job"]["spec"])
    args = runner["args"]
    assert args[:3] == ["scalenc", "run", "/jobs/job.toml"]
    assert option(args, "--scheduler") == "$(DASK_SCHEDULER_ADDRESS)"
    check_cli_accepts([a.replace("$(DASK_SCHEDULER_ADDRESS)", "tcp://x:8786") for a in args])
    mounts = {m["name"]: m["mountPath"] for m in runner["volumeMounts"]}
    volumes = {v["name"]: v for v in job["spec"]["job"]["spec"]["volumes"]}
    assert mounts == {"data": "/data", "job": "/jobs"}
    assert volumes["job"]["configMap"]["name"] == "scalenc-job"
    (pvc,) = yaml_docs(DEPLOY / "kubernetes" / "storage.yaml")
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]

    cluster = job["spec"]["cluster"]["spec"]
    assert cluster["worker"]["replicas"] >= 2
    (worker,) = containers(cluster["worker"]["spec"])
    assert worker["args"][:2] == ["dask", "worker"]
    assert option(worker["args"], "--dashboard-address").startswith("127.0.0.1:")
    assert {m["mountPath"] for m in worker["volumeMounts"]} == {"/data"}
    (scheduler,) = containers(cluster["scheduler"]["spec"])
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    port_names = {p["name"] for p in scheduler["ports"]}
    service = cluster["scheduler"]["service"]
    assert service["type"] == "ClusterIP"
    assert service["selector"]["dask.org/cluster-name"] == name
    assert {p["targetPort"] for p in service["ports"]} <= port_names
    assert {runner["image"], worker["image"], scheduler["image"]} == {"scalenc:latest"}

    policy = kinds["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == {"dask.org/cluster-name": name}
    assert policy["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"dask.org/cluster-name": name}}}]}
    ]

    readme = bash_blocks(DEPLOY / "kubernetes" / "README.md")
    assert (
        "kubectl create configmap scalenc-job --from-file=job.toml=deploy/jobs/job.toml" in readme
    )
    assert "kubectl apply -f deploy/kubernetes/daskjob.yaml" in readme
    assert f"kubectl logs -f {name}-runner" in readme
    assert f"kubectl port-forward svc/{name}-scheduler 8787:8787" in readme


def test_kubernetes_helm_values_and_job():
    (values,) = yaml_docs(DEPLOY / "kubernetes" / "helm-values.yaml")
    assert values["scheduler"]["serviceType"] == "ClusterIP"
    assert values["jupyter"]["enabled"] is False
    assert values["webUI"]["ingress"]["enabled"] is False
    volumes = values["worker"]["mounts"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == "scalenc-data"
    assert values["worker"]["image"]["dask_worker"] in (DEPLOY / "Dockerfile").read_text()

    (job,) = yaml_docs(DEPLOY / "kubernetes" / "job.yaml")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["spec"]["backoffLimit"] == 0
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    (runner,) = containers(spec)
    assert runner["args"][:3] == ["scalenc", "run", "/jobs/job.toml"]
    check_cli_accepts(runner["args"])
    env = {e["name"]: e["value"] for e in runner["env"]}
    service = f"{values['fullnameOverride']}-scheduler"
    assert env["SCALENC_SCHEDULER"] == f"tcp://{service}:{values['scheduler']['servicePort']}"
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["job"]["configMap"]["name"] == "scalenc-job"
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == "scalenc-data"

    readme = bash_blocks(DEPLOY / "kubernetes" / "README.md")
    release = values["fullnameOverride"].removesuffix("-dask")
    assert f"helm install {release} dask/dask -f deploy/kubernetes/helm-values.yaml" in readme
    assert "kubectl apply -f deploy/kubernetes/job.yaml" in readme
    assert f"kubectl logs -f job/{job['metadata']['name']}" in readme
    assert f"svc/{service}" in readme


def test_no_public_exposure_in_kubernetes():
    for path in (DEPLOY / "kubernetes").glob("*.yaml"):
        text = path.read_text()
        for word in ("LoadBalancer", "NodePort", "hostNetwork: true", "hostPort"):
            assert not re.search(rf"^[^#]*{word}", text, re.M), (path.name, word)


def test_ssh_and_slurm_scripts():
    for script in [*DEPLOY.glob("*/*.sh"), DEPLOY / "slurm" / "scalenc.sbatch"]:
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert os.access(script, os.X_OK) or script.suffix == ".sbatch", script
    start = (DEPLOY / "ssh" / "start-cluster.sh").read_text()
    assert "--protocol tls" in start and "--dashboard-address 127.0.0.1:8787" in start
    assert "--dashboard-address 127.0.0.1:0" in start and "tls://$scheduler:$port" in start
    readme = bash_blocks(DEPLOY / "ssh" / "README.md")
    assert "deploy/ssh/start-cluster.sh node1 node2 node3" in readme
    assert "scalenc run deploy/jobs/job.toml --scheduler tls://node1:8786" in readme

    spec = importlib.util.spec_from_file_location(
        "slurm_cluster", DEPLOY / "slurm" / "slurm_cluster.py"
    )
    slurm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slurm)  # imports dask_jobqueue only in main()
    readme = (DEPLOY / "slurm" / "README.md").read_text()
    line = re.search(r"python deploy/slurm/slurm_cluster\.py (.*?)(?<!\\)\n", readme, re.S).group(1)
    args = slurm.parse_args(line.replace("\\\n", " ").split())
    assert args.job == "deploy/jobs/job.toml" and args.jobs == 4
    sbatch = (DEPLOY / "slurm" / "scalenc.sbatch").read_text()
    assert "python deploy/slurm/slurm_cluster.py" in sbatch
    assert "sbatch deploy/slurm/scalenc.sbatch" in readme
    env = slurm.client_env(Path("/c"), "tls://n:1")
    assert env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] == "/c/client.pem"


def test_deploy_readmes_name_existing_files():
    for readme in DEPLOY.rglob("README.md"):
        for ref in re.findall(r"\bdeploy/[\w./-]+", readme.read_text()):
            ref = ref.rstrip(".")
            if ref.startswith("deploy/certs"):
                continue  # made by make-certs.sh
            assert (ROOT / ref).exists(), (readme, ref)


def test_local_cluster_with_tls(certs):
    with scalenc.connect(
        "local", n_workers=1, threads_per_worker=1, security=certs / "good", quiet=True
    ) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result() == 3


def _reap(pids, seconds: float = 20.0) -> None:
    """Wait up to ``seconds`` for the processes a start script left (the stop script ends
    them), then kill any still running."""
    deadline = time.monotonic() + seconds
    for pid in pids:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # 7 s: a TLS scheduler and workers started by the deploy scripts
def test_ssh_scripts_start_a_tls_cluster(tmp_path, certs):
    """deploy/ssh/start-cluster.sh and stop-cluster.sh, with an `ssh` that runs locally."""
    import socket

    home = tmp_path / "home"
    home.mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text(f'#!/bin/bash\nshift\ncd {home} && exec bash -c "$*"\n')
    (fake / "ssh").chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
        "CERTS": str(certs / "good"),
        "PORT": str(port),
        "NTHREADS": "1",
        "MEMORY": "1GB",
        "REMOTE_ENV": f"export PATH={BIN}:$PATH",
    }
    hosts = ["127.0.0.1", "127.0.0.1", "127.0.0.1"]  # scheduler + 2 workers, all local
    try:
        subprocess.run(
            ["bash", str(DEPLOY / "ssh" / "start-cluster.sh"), *hosts],
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        with scalenc.connect(
            f"tls://127.0.0.1:{port}", security=certs / "good", n_workers=2, timeout=60, quiet=True
        ) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            assert all(a.startswith("tls://127.0.0.1:") for a in client.nthreads())
        with pytest.raises(ClusterUnavailableError, match="speaks TLS, but no certificates"):
            with scalenc.connect(f"tls://127.0.0.1:{port}", timeout=5):
                pass
    finally:
        pids = [int(p) for f in home.glob("scalenc-*.pid*") for p in f.read_text().split()]
        subprocess.run(
            ["bash", str(DEPLOY / "ssh" / "stop-cluster.sh"), *hosts],
            env=env,
            capture_output=True,
            timeout=60,
        )
        _reap(pids)
    assert pids and not list(home.glob("scalenc-*.pid*"))


def test_deploy_dask_commands_use_real_options():
    """Every option given to `dask scheduler|worker|ssh` in deploy/ exists in this Dask."""
    helps = {
        role: subprocess.run(
            [DASK, role, "--help"], capture_output=True, text=True, check=True
        ).stdout
        for role in ("scheduler", "worker", "ssh")
    }
    commands = []
    for path in ("docker-compose.yml", "docker-compose.tls.yml"):
        for svc in yaml_docs(DEPLOY / path)[0]["services"].values():
            commands.append(svc.get("command", []))
    job = next(
        d for d in yaml_docs(DEPLOY / "kubernetes" / "daskjob.yaml") if d["kind"] == "DaskJob"
    )
    for role in ("worker", "scheduler"):
        commands += [c["args"] for c in job["spec"]["cluster"]["spec"][role]["spec"]["containers"]]
    texts = [
        (DEPLOY / "ssh" / "start-cluster.sh").read_text(),
        bash_blocks(DEPLOY / "tls" / "README.md"),
        bash_blocks(DEPLOY / "ssh" / "README.md"),
    ]
    for text in texts:
        for m in re.finditer(r"dask (scheduler|worker|ssh)\b((?:\\\n|[^\n])*)", text):
            commands.append(["dask", m.group(1), *m.group(2).replace("\\\n", " ").split()])
    checked = 0
    for args in commands:
        if args[:1] != ["dask"] or args[1] not in helps:
            continue
        for flag in (a for a in args[2:] if a.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", helps[args[1]]), (args[1], flag)
            checked += 1
    assert checked > 35


def small_job_file(tmp_path: Path) -> Path:
    """deploy/jobs/job.toml with its workdir in tmp_path and 100× fewer rows (blocks too)."""
    text = (DEPLOY / "jobs" / "job.toml").read_text()
    text = text.replace('workdir = "/data/scalenc-job"', f'workdir = "{tmp_path / "work"}"')
    text, n = re.subn(r"^n = (\d+)00$", r"n = \1", text, flags=re.M)
    text, chunks = re.subn(r"^chunk_rows = (\d+)00$", r"chunk_rows = \1", text, flags=re.M)
    assert n == chunks == 2, "deploy/jobs/job.toml no longer has two make-data steps"
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


@pytest.mark.slow  # the compose runner's job on a started cluster (10-20 s); the job itself runs in test_cli
def test_compose_runner_command_runs_the_job(dask_processes, tmp_path):
    """The compose runner's command and job file, the scheduler at a loopback address."""
    scalenc_command()
    (compose,) = yaml_docs(DEPLOY / "docker-compose.yml")
    runner = compose["services"]["runner"]
    job = small_job_file(tmp_path)
    args = [str(job) if a == "/jobs/job.toml" else a for a in runner["command"][1:]]
    args = [str(tmp_path / "summary.json") if a == "/data/summary.json" else a for a in args]
    env = {**os.environ, **runner["environment"], "SCALENC_SCHEDULER": dask_processes.address}
    result = run_cli(*args, env=env)
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "evaluate" in json.dumps(summary)
    assert (tmp_path / "work" / "predictions.zarr").exists()


@pytest.mark.slow  # 9 s: the Slurm driver's processes
def test_slurm_driver_with_a_local_stand_in(tmp_path, certs, monkeypatch):
    """deploy/slurm/slurm_cluster.py end to end, SLURMCluster replaced by a TLS LocalCluster."""
    import types

    import distributed

    scalenc_command()

    class FakeSLURMCluster(distributed.LocalCluster):
        def __init__(self, *, protocol, security, scheduler_options, **slurm_options):
            assert protocol == "tls://" and security.require_encryption
            assert scheduler_options["dashboard_address"].startswith("127.0.0.1:")
            super().__init__(
                n_workers=0,
                threads_per_worker=1,
                protocol=protocol,
                security=security,
                host="127.0.0.1",
                silence_logs=50,
                dashboard_address="127.0.0.1:0",
            )

        def scale(self, jobs):
            super().scale(jobs)

        def job_script(self):
            return "#!/bin/bash (stand-in)"

    monkeypatch.setitem(
        sys.modules, "dask_jobqueue", types.SimpleNamespace(SLURMCluster=FakeSLURMCluster)
    )
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    spec = importlib.util.spec_from_file_location(
        "slurm_cluster", DEPLOY / "slurm" / "slurm_cluster.py"
    )
    slurm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slurm)
    job = small_job_file(tmp_path)
    code = slurm.main(
        [
            str(job),
            "--jobs",
            "2",
            "--certs",
            str(certs / "good"),
            "--log-directory",
            str(tmp_path / "logs"),
        ]
    )
    assert code == 0
    assert (tmp_path / "work" / "predictions.zarr").exists()


# --- deploy/: the GPU set-up (dask-cuda workers; the files are checked without a GPU) -------

#: the options of `dask cuda worker` (dask-cuda 26.10's --help) that deploy/ may give; checked
#: against the installed dask-cuda's --help where dask-cuda can be imported
DASK_CUDA_WORKER_OPTIONS = {
    "--host",
    "--nthreads",
    "--name",
    "--memory-limit",
    "--device-memory-limit",
    "--dashboard-address",
    "--local-directory",
    "--scheduler-file",
    "--protocol",
    "--interface",
    "--death-timeout",
    "--tls-ca-file",
    "--tls-cert",
    "--tls-key",
}
GPU_START = DEPLOY / "gpu" / "start-gpu-cluster.sh"
GPU_STOP = DEPLOY / "gpu" / "stop-gpu-cluster.sh"


def compose_merge(*paths: str) -> dict:
    """The services of compose files given in order, merged as compose merges them."""
    services: dict = {}
    for path in paths:
        for name, svc in yaml_docs(DEPLOY / path)[0]["services"].items():
            merged = services.setdefault(name, {})
            for key, value in svc.items():
                if isinstance(value, dict) and isinstance(merged.get(key), dict):
                    merged[key] = {**merged[key], **value}
                elif key == "volumes":
                    merged[key] = [*merged.get(key, []), *value]
                else:
                    merged[key] = value
    return services


def gpu_devices(svc: dict) -> list:
    return svc["deploy"]["resources"]["reservations"]["devices"]


def test_docker_compose_gpu():
    (gpu,) = yaml_docs(DEPLOY / "docker-compose.gpu.yml")
    assert set(gpu["services"]) == {"scheduler", "worker", "runner"}
    for name, svc in gpu["services"].items():
        assert "ports" not in svc and "networks" not in svc, name  # the base file's stay
    services = compose_merge("docker-compose.yml", "docker-compose.gpu.yml")
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r'^ARG PIP_EXTRA=""$', dockerfile, re.M)  # the default image: no extra
    assert re.search(r'^RUN pip install \. "bokeh>=3\.1" \$PIP_EXTRA ', dockerfile, re.M)
    for name, svc in services.items():  # one image everywhere: the same dask and distributed
        assert svc["image"] == "scalenc:gpu", name
        assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        extra = svc["build"]["args"]["PIP_EXTRA"].split()
        assert {".[gpu]", "cupy-cuda12x[ctk]", "dask-cuda[cu12]"} <= set(extra), name
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)

    worker = services["worker"]
    assert worker["command"][:4] == ["dask", "cuda", "worker", "tcp://scheduler:8786"]
    assert option(worker["command"], "--nthreads") == "1"
    assert option(worker["command"], "--dashboard-address").startswith("127.0.0.1:")
    assert "--device-memory-limit" in worker["command"]
    assert worker["networks"] == ["dask"] and "ports" not in worker
    assert worker["deploy"]["replicas"] == 1  # dask-cuda starts a worker process per GPU
    assert gpu_devices(worker) == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]

    runner = services["runner"]
    assert runner["command"][:3] == ["scalenc", "run", "/jobs/gpu-job.toml"]
    check_cli_accepts(runner["command"])
    assert (DEPLOY / "jobs" / "gpu-job.toml").is_file() and "./jobs:/jobs:ro" in runner["volumes"]
    assert gpu_devices(runner) == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert runner["environment"]["SCALENC_SCHEDULER"] == "tcp://scheduler:8786"

    up = "docker compose -f deploy/docker-compose.yml -f deploy/docker-compose.gpu.yml up --build"
    assert up in bash_blocks(DEPLOY / "README.md")
    assert up in bash_blocks(DEPLOY / "gpu" / "README.md")


def test_docker_compose_gpu_tls():
    files = [
        "docker-compose.yml",
        "docker-compose.tls.yml",
        "docker-compose.gpu.yml",
        "docker-compose.gpu-tls.yml",
    ]
    (gpu_tls,) = yaml_docs(DEPLOY / files[-1])
    assert set(gpu_tls["services"]) == {"worker"}
    services = compose_merge(*files)
    worker = services["worker"]["command"]
    assert worker[:4] == ["dask", "cuda", "worker", "tls://scheduler:8786"]
    for flag, path in (
        ("--tls-ca-file", "ca"),
        ("--tls-cert", "worker"),
        ("--tls-key", "worker-key"),
    ):
        assert option(worker, flag) == f"/certs/{path}.pem"
    tls_options = worker[worker.index("--tls-ca-file") :]
    plain = compose_merge("docker-compose.yml", "docker-compose.gpu.yml")["worker"]["command"]
    assert worker[4 : -len(tls_options)] == plain[4:]  # the GPU worker's options, with TLS
    assert "./certs:/certs:ro" in services["worker"]["volumes"]
    assert option(services["scheduler"]["command"], "--protocol") == "tls"
    assert services["runner"]["environment"]["SCALENC_SCHEDULER"] == "tls://scheduler:8786"
    assert services["runner"]["command"][2] == "/jobs/gpu-job.toml"
    readme = bash_blocks(DEPLOY / "gpu" / "README.md")
    assert "-f deploy/" + " -f deploy/".join(files) in readme


def test_gpu_job_file_is_the_job_on_gpus():
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    job = tomllib.loads((DEPLOY / "jobs" / "job.toml").read_text())
    gpu = tomllib.loads((DEPLOY / "jobs" / "gpu-job.toml").read_text())
    assert gpu["step"] == job["step"]
    assert gpu["job"].pop("defaults") == {"device": "gpu"}
    assert gpu["job"] == {**job["job"], "workdir": "/data/scalenc-gpu-job"}
    parsed = read_job(DEPLOY / "jobs" / "gpu-job.toml")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    devices = {}
    for step in parsed.steps:
        argv = step_argv(step, sub.choices[step.command], parsed.defaults)
        args = parser.parse_args([step.command, *argv])
        devices[step.command] = getattr(args, "device", None)
    assert devices == {"make-data": None, "fit": "gpu", "predict": "gpu", "evaluate": "gpu"}


def test_gpu_scripts():
    for script in (GPU_START, GPU_STOP):
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert os.access(script, os.X_OK), script
    start = GPU_START.read_text()
    assert "dask cuda worker $join" in start and "--scheduler-file $file" in start
    # without hosts: scheduler and workers on loopback, found by the scheduler file
    assert 'listen="--host 127.0.0.1"' in start
    assert 'join="--scheduler-file $file --host 127.0.0.1"' in start
    # with hosts: TLS only, as deploy/ssh/start-cluster.sh
    assert 'listen="--protocol tls --host $scheduler $(tls scheduler)"' in start
    assert 'join="tls://$scheduler:$port $(tls worker)"' in start
    assert (
        "--dashboard-address 127.0.0.1:8787" in start and "--dashboard-address 127.0.0.1:0" in start
    )
    assert "--device gpu" in start
    stop = GPU_STOP.read_text()
    for name in ("scalenc-gpu-worker.pids", "scalenc-gpu-scheduler.pid"):
        assert name in start and name in stop

    readme = bash_blocks(DEPLOY / "gpu" / "README.md")
    for line in (
        "deploy/gpu/start-gpu-cluster.sh ",
        "deploy/gpu/start-gpu-cluster.sh node1 gpu1 gpu2",
        "deploy/gpu/stop-gpu-cluster.sh\n",
        "deploy/gpu/stop-gpu-cluster.sh node1 gpu1 gpu2",
        "scalenc run deploy/jobs/gpu-job.toml --scheduler-file ~/scalenc-gpu-scheduler.json",
        "scalenc run deploy/jobs/gpu-job.toml --scheduler tls://node1:8786 --tls-dir",
    ):
        assert line in readme, line
    for m in re.finditer(r"^(scalenc (?:run|fit) .*)$", readme, re.M):
        check_cli_accepts(m.group(1).replace("~", "/home/u").split())
    assert "--device gpu" in readme


def test_deploy_gpu_commands_use_real_options():
    """`dask scheduler` and `dask cuda worker` options given in the GPU set-up exist."""
    scheduler_help = subprocess.run(
        [DASK, "scheduler", "--help"], capture_output=True, text=True, check=True
    ).stdout
    if importlib.util.find_spec("dask_cuda") is not None:
        worker_help = subprocess.run(
            [DASK, "cuda", "worker", "--help"], capture_output=True, text=True, check=True
        ).stdout
        cuda_options = set(re.findall(r"--[\w-]+", worker_help))
    else:
        cuda_options = DASK_CUDA_WORKER_OPTIONS
    commands = [
        svc["command"]
        for path in ("docker-compose.gpu.yml", "docker-compose.gpu-tls.yml")
        for svc in yaml_docs(DEPLOY / path)[0]["services"].values()
        if "command" in svc
    ]
    for m in re.finditer(r"dask (scheduler|cuda worker)\b((?:\\\n|[^\n])*)", GPU_START.read_text()):
        commands.append(["dask", *m.group(1).split(), *m.group(2).replace("\\\n", " ").split()])
    checked = 0
    for args in commands:
        if args[:3] == ["dask", "cuda", "worker"]:
            for flag in (a for a in args[3:] if a.startswith("--")):
                assert flag in cuda_options, ("dask cuda worker", flag)
                checked += 1
        elif args[:2] == ["dask", "scheduler"]:
            for flag in (a for a in args[2:] if a.startswith("--")):
                assert re.search(rf"{re.escape(flag)}\b", scheduler_help), ("scheduler", flag)
                checked += 1
    assert checked >= 20  # 13 in the compose files, 7 in the script


@pytest.mark.slow  # 4 s a mode: the start and stop scripts with `dask worker` for the GPU workers
@pytest.mark.parametrize("mode", ["loopback", "tls"])
def test_gpu_scripts_start_a_cluster(mode, tmp_path, certs):
    """deploy/gpu/ start and stop scripts, `dask cuda worker` played by `dask worker`.

    Without hosts (loopback): a tcp scheduler and worker on 127.0.0.1 found through the
    scheduler file. With hosts (tls): an `ssh` that runs locally, as in the ssh scripts' test.
    """
    import socket

    home = tmp_path / "home"
    home.mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    # dask-cuda's command without a GPU: its arguments noted, then `dask worker` without the
    # device's option
    (fake / "dask").write_text(
        "#!/bin/bash\n"
        "if [[ $1 == cuda && $2 == worker ]]; then\n"
        '  shift 2; echo "$*" >> ~/cuda-worker-args; args=()\n'
        "  while (($#)); do case $1 in --device-memory-limit) shift 2;;"
        ' *) args+=("$1"); shift;; esac; done\n'
        f'  exec {DASK} worker "${{args[@]}}"\n'
        "fi\n"
        f'exec {DASK} "$@"\n'
    )
    (fake / "ssh").write_text(f'#!/bin/bash\nshift\ncd {home} && exec bash -c "$*"\n')
    for tool in ("dask", "ssh"):
        (fake / tool).chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
        "CERTS": str(certs / "good"),
        "PORT": str(port),
        "MEMORY": "1GB",
        "REMOTE_ENV": f"export PATH={fake}:{BIN}:$PATH",
    }
    hosts = [] if mode == "loopback" else ["127.0.0.1", "127.0.0.1"]
    scheme = "tcp" if mode == "loopback" else "tls"
    security = None if mode == "loopback" else certs / "good"
    try:
        started = subprocess.run(
            ["bash", str(GPU_START), *hosts],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        scheduler_file = home / "scalenc-gpu-scheduler.json"
        assert json.loads(scheduler_file.read_text())["address"] == f"{scheme}://127.0.0.1:{port}"
        with scalenc.connect(
            scheduler_file=str(scheduler_file),
            security=security,
            n_workers=1,
            timeout=60,
            quiet=True,
        ) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            assert all(a.startswith(f"{scheme}://127.0.0.1:") for a in client.nthreads())
        (args,) = (home / "cuda-worker-args").read_text().splitlines()
        assert "--device-memory-limit 0.8" in args and "--nthreads 1" in args
        assert ("--host 127.0.0.1" in args) == (mode == "loopback")
        if mode == "loopback":
            assert "--device gpu --scheduler-file ~/scalenc-gpu-scheduler.json" in started.stdout
        else:
            assert f"--scheduler tls://127.0.0.1:{port} --tls-dir" in started.stdout
    finally:
        pids = [int(p) for f in home.glob("scalenc-gpu-*.pid*") for p in f.read_text().split()]
        subprocess.run(["bash", str(GPU_STOP), *hosts], env=env, capture_output=True, timeout=60)
        _reap(pids)
    assert len(pids) == 2 and not list(home.glob("scalenc-gpu-*.pid*"))
