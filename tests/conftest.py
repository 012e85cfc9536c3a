"""Shared fixtures: data makers, schedulers, and a real LocalCluster on 127.0.0.1."""

from __future__ import annotations

import os

# Before anything loads SciPy (here or in a pytest-xdist worker, which imports this file
# first too): scikit-learn's check_array_api_input runs only with SCIPY_ARRAY_API set, and
# SciPy reads it once, at import. Set to "1", not defaulted: any other value makes the
# check fail (scikit-learn's array API dispatch asks for exactly "1") instead of skipping,
# and every run, CI's and a shell's, then tests SciPy in the same mode.
os.environ["SCIPY_ARRAY_API"] = "1"

import sys
from pathlib import Path

import dask
import numpy as np
import pytest

# The tests live in one folder per package of scalenc (tests/encoder/, tests/cli/, ...) and
# import helpers from one another by module name (``from test_cluster import
# DaskProcesses``): every folder is on sys.path, whichever test pytest collects first.
TESTS = Path(__file__).resolve().parent
for _folder in sorted(TESTS.iterdir()):
    if any(_folder.glob("test_*.py")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))

DATA_DIR = Path(
    os.environ.get("SCALENC_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)


def shared_dataset(name: str):
    """Load ../shared/data/<name>.npz, or skip with the reason when it is absent."""
    path = DATA_DIR / f"{name}.npz"
    if not path.exists():
        pytest.skip(f"{path} is absent (set SCALENC_DATA_DIR to the papers' datasets)")
    return np.load(path, allow_pickle=False)


def make_blobs(n=300, p=6, K=3, *, seed=0, sep=3.0, dtype=np.float64, unlabeled=0.0):
    """Gaussian classes with shared covariance; a fraction of labels set to -1."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=sep, size=(K, p))
    y = rng.integers(0, K, n)
    X = centres[y] + rng.normal(size=(n, p)) @ rng.normal(size=(p, p)) * 0.5
    if unlabeled:
        y = y.copy()
        y[rng.random(n) < unlabeled] = -1
    return X.astype(dtype), y


@pytest.fixture(scope="session")
def process_pool():
    """The worker processes of Dask's ``processes`` scheduler, started once per test run.

    Left to itself, that scheduler starts a new pool of spawned processes for every
    ``compute`` and shuts it down after it (each new process importing NumPy, Dask and
    scalenc), so a fit of several passes started several pools. The pool is made as Dask
    makes its own (its context, its initializer, a fixed PYTHONHASHSEED inherited by the
    workers): the tests still run in other processes, reused across computes."""
    from concurrent.futures import ProcessPoolExecutor

    from dask.multiprocessing import get_context, initialize_worker_process
    from dask.system import CPU_COUNT

    if os.environ.get("PYTHONHASHSEED") in (None, "0"):
        os.environ["PYTHONHASHSEED"] = "6640"  # what dask.multiprocessing.get sets
    pool = ProcessPoolExecutor(
        CPU_COUNT, mp_context=get_context(), initializer=initialize_worker_process
    )
    yield pool
    pool.shutdown()


@pytest.fixture(params=["threads", "sync", "processes"])
def scheduler(request):
    """Run the test body under each in-process / multiprocess Dask scheduler (the
    ``processes`` one on the session's :func:`process_pool`; the threaded scheduler would
    take that pool too, so a test nests ``sync`` for its in-process reference)."""
    pool = {"pool": request.getfixturevalue("process_pool")} if request.param == "processes" else {}
    with dask.config.set(scheduler=request.param, **pool):
        yield request.param


def loopback_cluster():
    """A new LocalCluster of 2 single-thread worker processes (with nannies) on 127.0.0.1,
    its dashboard on a free port (Dask's default 8787 may be taken)."""
    distributed = pytest.importorskip("distributed")
    return distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=50,
    )


@pytest.fixture(scope="session")
def local_cluster():
    """A distributed LocalCluster of 2 worker processes bound to 127.0.0.1."""
    with loopback_cluster() as cluster:
        yield cluster


@pytest.fixture
def client(local_cluster):
    """A Client to the session LocalCluster, the default scheduler within the test."""
    import distributed

    with distributed.Client(local_cluster, set_as_default=True) as c:
        yield c


def cupy_or_skip():
    """CuPy, where it runs on a CUDA device; else the test skips (CI has no GPU)."""
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("CuPy sees no CUDA device")
    except Exception as error:  # no driver
        pytest.skip(f"CUDA is not usable: {error}")
    return cupy
