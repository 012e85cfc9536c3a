"""Out of core for real: a Zarr store several times larger than the memory limit of the only
Dask worker, fitted and predicted with correct results, with nothing n-sized on the client."""

import contextlib

import dask.array as da
import numpy as np
import psutil
import pytest
import zarr
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from scalenc import EncoderClassifier, load, write_output
from scalenc.simulate import simulate

pytestmark = pytest.mark.cluster

N, P, K = 1_500_000, 200, 5  # 1.2 GB of float32
CHUNK = 10_000  # 8 MB blocks
MEMORY_LIMIT = 400 * 2**20  # the worker's limit: the store is 3x larger


@contextlib.contextmanager
def one_small_worker(memory_limit: int):
    """A client of a LocalCluster with one worker process of two threads and ``memory_limit``."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            memory_limit=memory_limit,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=50,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def limited_client():
    with one_small_worker(MEMORY_LIMIT) as client:
        yield client


@pytest.fixture(scope="module")
def store(tmp_path_factory, limited_client):
    path = tmp_path_factory.mktemp("ooc") / "data.zarr"
    X, y = simulate("normal_noise", N, P, K, random_state=1, chunk_rows=CHUNK)
    y = da.where(da.arange(N, chunks=CHUNK) % 10 == 0, -1, y)  # 10% unlabeled
    da.to_zarr(X, str(path), component="X")  # written by the limited worker, block by block
    da.to_zarr(y, str(path), component="y")
    return path


def _stream_oracle(path):
    """Class means and Z = X Uᵀ by a plain NumPy loop over the store's chunks."""
    group = zarr.open_group(str(path), mode="r")
    Xz, yz = group["X"], group["y"]
    sums, counts, total, squares = np.zeros((K, P)), np.zeros(K), np.zeros(P), np.zeros(P)
    for start in range(0, N, 100_000):
        X, y = Xz[start : start + 100_000].astype(np.float64), yz[start : start + 100_000]
        total += X.sum(0)
        squares += (X * X).sum(0)
        for k in range(K):
            sums[k] += X[y == k].sum(0)
            counts[k] += np.sum(y == k)
    U = sums / counts[:, None]
    spread = np.sqrt(squares / N - (total / N) ** 2)  # each feature's standard deviation
    Z = np.concatenate([Xz[s : s + 100_000].astype(np.float64) @ U.T for s in range(0, N, 100_000)])
    return U, spread, Z, yz[:]


@pytest.mark.slow  # 35 s with its 1.2 GB store; the small-worker fits below stay in the default run
def test_fit_predict_larger_than_worker_memory(store, tmp_path, limited_client):
    total = N * P * 4
    assert total > 2.5 * MEMORY_LIMIT
    client_rss = psutil.Process().memory_info().rss
    X, y = load(store)
    model = EncoderClassifier(kernels=("linear",)).fit(X, y)
    assert model.n_passes_ == 1
    out = write_output(model.predict(X), tmp_path / "pred.zarr")
    accuracy = model.score(X, y)
    grown = psutil.Process().memory_info().rss - client_rss
    assert grown < 150 * 2**20, f"the client grew by {grown / 2**20:.0f} MiB"
    # nothing was lost to a dying worker: every worker is still the original one
    assert len(limited_client.scheduler_info()["workers"]) == 1

    U, spread, Z, labels = _stream_oracle(store)
    # float32 data: the one-pass fit's class sums are float32 tile products, exact to
    # float32 rounding of the spread
    assert np.all(np.abs(model.class_means_ - U) <= 1e-6 * spread)
    lab = labels >= 0
    lda = LinearDiscriminantAnalysis().fit(Z[lab], labels[lab])
    pred = zarr.open_array(str(out), mode="r")[:]
    np.testing.assert_array_equal(pred, lda.predict(Z))
    assert accuracy == pytest.approx(np.mean(pred[lab] == labels[lab]))


@pytest.mark.slow  # shares the 1.2 GB store
def test_multi_kernel_fit_larger_than_worker_memory(store):
    X, y = load(store)
    # the cache persisted on the worker and spilled (``"auto"`` would compute Z again here
    # when the worker holds too much already to keep Z under its pause threshold), every
    # kernel over every row
    model = EncoderClassifier(
        kernels=("linear", "euclidean"), cache_embedding=True, choice_sample=None
    )
    model.fit(X[:600_000], y[:600_000])
    assert model.n_passes_ == 2 and np.isfinite(model.cross_entropy_).all()


@pytest.mark.slow  # shares the 1.2 GB store
def test_default_fit_with_its_sample_larger_than_worker_memory(store, fresh_small_client):
    """EncoderClassifier() on 1.5 M rows on a new 600 MiB worker: pass 1 gathers the kernel
    choice's sample, sized to an eighth of what a task may hold (the full 65 536 rows,
    52 MB, got a 400 MiB worker killed in its merge), and no worker is restarted."""
    before = set(fresh_small_client.scheduler_info()["workers"])
    X, y = load(store)
    model = EncoderClassifier().fit(X, y)
    plan = model.fit_plan_
    assert plan["name"] == "sample" and 4096 <= plan["sample_rows"] < 65536
    assert model.n_passes_ == plan["passes_over_X"]
    assert set(fresh_small_client.scheduler_info()["workers"]) == before


@pytest.mark.slow  # nRBFN's whole default search on small workers (20-60 s); the many-class kernels below stay in the default run
def test_nrbfn_defaults_fit_within_small_workers_without_a_kill(limited_client):
    """NRBFNClassifier() with no memory_limit on a worker of 400 MiB: the plan's budget is
    what the worker can add before Dask pauses it (80 % of its limit, less what it holds
    with scalenc imported), so the basis (grown, or the rule's capped) fits and no worker
    is killed. A budget of the whole limit sized the Gram partials to it and the nanny
    killed the worker."""
    import warnings

    from scalenc import NRBFNClassifier
    from scalenc.exceptions import BasisCappedWarning

    before = set(limited_client.scheduler_info()["workers"])
    X, y = simulate("normal_noise", 60_000, 20, 3, random_state=2, chunk_rows=10_000)
    for params in ({}, {"n_basis": None, "alpha": 1e-13}):  # grown; the confidence rule
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BasisCappedWarning)
            model = NRBFNClassifier(**params).fit(X, y)
        plan = model.memory_plan_
        assert plan["budget"]["worker"] < 0.8 * MEMORY_LIMIT
        assert "pause threshold" in plan["budget_source"]
        assert model.basis_.shape[0] <= plan["max_basis"] <= plan["largest_basis_that_fits"]
        assert model.score(X, y) > 0.9
    assert set(limited_client.scheduler_info()["workers"]) == before  # no worker restarted


@pytest.fixture
def fresh_small_client():
    """One new worker of 600 MiB (two threads), for a test that must not inherit what the
    module's earlier fits left in the shared worker's memory."""
    with one_small_worker(600 * 2**20) as client:
        yield client


def test_many_class_kernels_fit_small_workers_without_a_kill(fresh_small_client):
    """Three kernels, K = 50 classes, p = 16, blocks of 100 000 rows on a 600 MiB worker:
    a block of Z is 120 MB, more than a task may hold there. "auto" computes Z again in
    row tiles instead of caching it (and says why), the cross-entropy is the in-process
    one, and no worker is restarted. Embedding whole blocks held several hundred MB per
    task (the code before killed every 400 MiB worker it was given), and a cache
    persisted on the worker paused it for good."""
    limited_client = fresh_small_client
    before = set(limited_client.scheduler_info()["workers"])
    n, chunk = 400_000, 100_000
    centres = 2 * np.random.default_rng(3).normal(size=(50, 16)).astype(np.float32)
    rng = da.random.default_rng(3)
    y = rng.integers(0, 50, n, chunks=chunk)
    noise = rng.standard_normal((n, 16), chunks=(chunk, 16), dtype=np.float32)
    X = noise + y.map_blocks(lambda b: centres[b], new_axis=1, chunks=(y.chunks[0], (16,)))
    kernels = ("linear", "euclidean", "spearman")
    model = EncoderClassifier(kernels=kernels).fit(X, y)
    assert model.fit_plan_["name"] == "recompute"
    assert "task may hold" in model.fit_plan_["memory"]
    assert set(limited_client.scheduler_info()["workers"]) == before  # no worker restarted
    import dask

    Xn, yn = limited_client.compute([X, y], sync=True)
    with dask.config.set(scheduler="threads"):
        ref = EncoderClassifier(kernels=kernels, cache_embedding=True).fit(Xn, yn)
    np.testing.assert_allclose(model.cross_entropy_, ref.cross_entropy_, rtol=1e-9)
    assert model.kernel_index_ == ref.kernel_index_
