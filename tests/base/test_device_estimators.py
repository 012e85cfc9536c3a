"""GPUs (issue 28): Dask arrays of CuPy blocks through every estimator, against NumPy input.

The tests marked ``gpu`` need CuPy and a CUDA device and skip elsewhere (CI has no GPU);
they were run on an NVIDIA H200 (benchmarks/README.md, "GPUs"). The others run
everywhere: the errors that say what to install, and ``connect`` with a cluster object.
"""

from __future__ import annotations

import json
import os

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import cupy_or_skip, make_blobs

import scalenc
from scalenc.exceptions import MissingDeviceDependency
from scalenc.io import to_device

ESTIMATORS = {
    "LRClassifier": lambda: scalenc.LRClassifier(),
    "NRBFNClassifier": lambda: scalenc.NRBFNClassifier(random_state=0),
    "EncoderClassifier": lambda: scalenc.EncoderClassifier(),
    "CCDR": lambda: scalenc.CCDR(random_state=0),
    "CCDRClassifier": lambda: scalenc.CCDRClassifier(random_state=0),
}
#: "The same models": relative (norm-wise) difference of every fitted array, and of the
#: outputs.
MODEL_RTOL = {np.float32: 1e-6, np.float64: 1e-10}
OUTPUT_RTOL = {np.float32: 1e-5, np.float64: 1e-9}
#: Arrays that come out of an ill-conditioned solve are compared through the model's
#: outputs instead: nRBFN's weights solve the normal equations at the paper's λ = 1e-13,
#: which amplify any difference in the Gram's rounding. On the host alone, the float64
#: model of this test's data cut in blocks of 1000 rows instead of 700 has weights 2.5e-4
#: and probabilities 2.4e-6 apart; an H200 against the host: 2.7e-4 and 2.5e-6. Its
#: outputs are held to ``SOLVED_OUTPUT_RTOL`` and its predictions to at most 0.1 %
#: changed (none changed on the H200).
SOLVED = {"weights_"}
SOLVED_OUTPUT_RTOL = {np.float32: 1e-3, np.float64: 1e-5}
ILL_CONDITIONED = {"NRBFNClassifier"}


def _record(what: str, value: float) -> None:
    """Append a measured difference to ``$SCALENC_GPU_DIFFS`` (the GPU run's report)."""
    path = os.environ.get("SCALENC_GPU_DIFFS")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"what": what, "relative_difference": float(value)}) + "\n")


def _has_cupy() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(_has_cupy(), reason="CuPy runs here")
def test_gpu_without_cupy_says_what_to_install(tmp_path):
    X = da.zeros((10, 2), chunks=5)
    with pytest.raises(MissingDeviceDependency, match=r"pip install 'scalenc\[gpu\]'"):
        to_device(X, "gpu")
    path = tmp_path / "X.npy"
    np.save(path, np.zeros((10, 2)))
    with pytest.raises(MissingDeviceDependency, match="CuPy"):
        scalenc.load(path, device="gpu")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        to_device(X, "tpu")


def test_to_device_cpu_keeps_numpy_blocks():
    X = da.zeros((10, 2), chunks=5)
    assert to_device(X, "cpu") is X


def test_local_cuda_without_dask_cuda_says_what_to_install():
    pytest.importorskip("distributed")
    try:
        import dask_cuda  # noqa: F401

        pytest.skip("dask-cuda is installed")
    except ImportError:
        pass
    with pytest.raises(MissingDeviceDependency, match="dask-cuda"):
        with scalenc.connect("local-cuda"):
            pass


@pytest.mark.cluster
def test_connect_accepts_a_cluster_object():
    from distributed import LocalCluster

    X, y = make_blobs(400, 4, 3, seed=2)
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        with scalenc.connect(cluster, quiet=True) as client:
            assert client.scheduler.address == cluster.scheduler_address
            model = scalenc.LRClassifier().fit(X, y)
    np.testing.assert_array_equal(model.predict(X), scalenc.LRClassifier().fit(X, y).predict(X))


# --- strict array API blocks through every estimator, on any machine ------------------


def _strict_blocks(X, rows):
    """X as a Dask array of ``array_api_strict`` blocks: like CuPy's, they refuse NumPy
    calls. Dask cannot hold a strict meta, so the meta says NumPy (outputs are read block
    by block, below)."""
    xs = pytest.importorskip("array_api_strict")
    meta = np.empty((0, 0), X.dtype)
    return da.from_array(X, chunks=(rows, -1)).map_blocks(xs.asarray, dtype=X.dtype, meta=meta)


def _strict_output(out) -> np.ndarray:
    from scalenc.math.xp import namespace, to_host

    xs = pytest.importorskip("array_api_strict")
    parts = [block.compute() for block in out.to_delayed().ravel()]
    assert all(namespace(part) is xs for part in parts)  # outputs stay in X's library
    return np.concatenate([to_host(part) for part in parts])


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_strict_array_blocks_give_the_numpy_model(name):
    """The engine, the passes and every estimator's block math on blocks that accept the
    array API standard only: the model and the outputs equal NumPy input's."""
    X, y = make_blobs(600, 5, 3, seed=1, sep=1.5)
    with dask.config.set(scheduler="sync"):
        cpu = ESTIMATORS[name]().fit(da.from_array(X, chunks=(150, -1)), y)
        dev = ESTIMATORS[name]().fit(_strict_blocks(X, 150), y)
        _assert_same_model(dev, cpu, np.float64)
        rtol = SOLVED_OUTPUT_RTOL if name in ILL_CONDITIONED else None
        for method in _outputs(cpu):
            got = _strict_output(getattr(dev, method)(_strict_blocks(X, 150)))
            _assert_same_output(got, getattr(cpu, method)(X), np.float64, method, rtol)


@pytest.mark.parametrize(
    "name", ["CCDRClassifier", "EncoderClassifier", "LRClassifier", "NRBFNClassifier"]
)
def test_strict_array_blocks_update_as_numpy_blocks(name):
    """``partial_fit`` of new strict blocks gives the model NumPy blocks give."""
    X, y = make_blobs(1200, 5, 3, seed=3, sep=1.0)
    with dask.config.set(scheduler="sync"):
        cpu = ESTIMATORS[name]().fit(da.from_array(X[:600], chunks=(300, -1)), y[:600])
        cpu.partial_fit(da.from_array(X[600:], chunks=(300, -1)), y[600:])
        dev = ESTIMATORS[name]().fit(_strict_blocks(X[:600], 300), y[:600])
        dev.partial_fit(_strict_blocks(X[600:], 300), y[600:])
    _assert_same_model(dev, cpu, np.float64)


# --- on a GPU -------------------------------------------------------------------------


def _fitted_arrays(est) -> dict:
    return {
        key: value
        for key, value in vars(est).items()
        if key.endswith("_")
        and not key.startswith("_")
        and isinstance(value, np.ndarray)
        and value.dtype.kind in "biuf"
    }


def _relative(got, want) -> float:
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def _assert_same_model(gpu, cpu, dtype, cpu64=None, what=""):
    """Every fitted array of ``gpu`` equals ``cpu``'s to ``MODEL_RTOL``, or — for float32
    data — the host's model of the same values in float64 (``cpu64``): the device sums
    class moments in float64 where the host's float32 path rounds in float32."""
    want = _fitted_arrays(cpu)
    got = _fitted_arrays(gpu)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert isinstance(got[key], np.ndarray), key  # fitted attributes live on the host
        if value.dtype.kind in "biu":
            np.testing.assert_array_equal(got[key], value, err_msg=key)
            continue
        if key in SOLVED:
            _record(f"{what} {key}", _relative(got[key], value))
            continue
        missing = np.isnan(value)
        np.testing.assert_array_equal(np.isnan(got[key]), missing, err_msg=key)
        refs = [value] + ([] if cpu64 is None else [_fitted_arrays(cpu64)[key]])
        diff = min(_relative(got[key][~missing], ref[~missing]) for ref in refs)
        _record(f"{what} {key}", diff)
        assert diff <= MODEL_RTOL[dtype], (key, diff)


def _assert_same_output(got, want, dtype, what, rtol=None):
    """Outputs equal to rounding, norm-wise (an entry near 0 may differ in its last digits
    relative to itself)."""
    assert got.shape == want.shape, what
    diff = _relative(got, want)
    _record(what, diff)
    assert diff <= (rtol or OUTPUT_RTOL)[dtype], (what, diff)


def _outputs(est):
    for method in ("predict_proba", "decision_function", "transform"):
        if hasattr(est, method):
            yield method


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_cupy_blocks_give_the_numpy_model(name, dtype):
    cupy = cupy_or_skip()
    X, y = make_blobs(3000, 8, 3, seed=7, sep=1.5, dtype=dtype)
    Xd = da.from_array(X, chunks=(700, -1))
    Xg = to_device(Xd, "gpu")
    what = f"{name} {dtype.__name__}"
    rtol = SOLVED_OUTPUT_RTOL if name in ILL_CONDITIONED else None
    with dask.config.set(scheduler="threads"):
        cpu = ESTIMATORS[name]().fit(Xd, y)
        cpu64 = None
        if dtype == np.float32:
            cpu64 = ESTIMATORS[name]().fit(da.from_array(X.astype(np.float64), chunks=(700, -1)), y)
        gpu = ESTIMATORS[name]().fit(Xg, y)
        _assert_same_model(gpu, cpu, dtype, cpu64, what)
        for method in _outputs(cpu):
            lazy = getattr(gpu, method)(Xg)
            assert isinstance(lazy._meta, cupy.ndarray), method  # lazy, on the device
            got = lazy.compute()
            assert isinstance(got, cupy.ndarray), method
            _assert_same_output(got.get(), getattr(cpu, method)(X), dtype, f"{what} {method}", rtol)
        if hasattr(cpu, "predict"):
            labels = gpu.predict(Xg).compute()
            assert isinstance(labels, cupy.ndarray)
            changed = float(np.mean(labels.get() != cpu.predict(X)))
            _record(f"{what} predictions changed", changed)
            assert changed <= (1e-3 if name in ILL_CONDITIONED else 0.0), changed
            assert abs(gpu.score(Xg, y) - cpu.score(Xd, y)) <= changed + 1e-12


@pytest.mark.gpu
def test_in_memory_cupy_array_in_cupy_out():
    cupy = cupy_or_skip()
    X, y = make_blobs(2000, 6, 3, seed=8)
    cpu = scalenc.NRBFNClassifier(random_state=0).fit(X, y)
    gpu = scalenc.NRBFNClassifier(random_state=0).fit(cupy.asarray(X), cupy.asarray(y))
    _assert_same_model(gpu, cpu, np.float64, what="in-memory NRBFNClassifier")
    proba = gpu.predict_proba(cupy.asarray(X))
    assert isinstance(proba, cupy.ndarray)
    what = "in-memory NRBFNClassifier predict_proba"
    _assert_same_output(proba.get(), cpu.predict_proba(X), np.float64, what, SOLVED_OUTPUT_RTOL)


@pytest.mark.gpu
def test_load_device_gpu_from_zarr_and_the_command(tmp_path):
    cupy = cupy_or_skip()
    X, y = make_blobs(2500, 5, 3, seed=9, dtype=np.float32)
    store = tmp_path / "data.zarr"
    scalenc.write_dataset(da.from_array(X, chunks=(600, -1)), da.from_array(y, chunks=600), store)
    Xg, yg = scalenc.load(store, device="gpu")
    assert isinstance(Xg._meta, cupy.ndarray) and isinstance(yg._meta, np.ndarray)
    gpu = scalenc.EncoderClassifier().fit(Xg, yg)
    cpu = scalenc.EncoderClassifier().fit(*scalenc.load(store))
    cpu64 = scalenc.EncoderClassifier().fit(X.astype(np.float64), y)
    _assert_same_model(gpu, cpu, np.float32, cpu64, "EncoderClassifier from Zarr")
    from scalenc.cli.app import main

    out = tmp_path / "model"
    code = main(["fit", "nrbfn", "--data", str(store), "--device", "gpu", "--model-out", str(out)])
    assert code == 0
    model = scalenc.load_model(out)
    np.testing.assert_array_equal(model.predict(X), scalenc.NRBFNClassifier().fit(X, y).predict(X))


@pytest.mark.gpu
@pytest.mark.cluster
def test_local_cuda_cluster_fits_cupy_blocks():
    cupy_or_skip()
    pytest.importorskip("dask_cuda")
    X, y = make_blobs(3000, 6, 3, seed=10, dtype=np.float32)
    Xg = to_device(da.from_array(X, chunks=(1000, -1)), "gpu")
    with scalenc.connect("local-cuda", n_workers=1, quiet=True) as client:
        assert len(client.scheduler_info()["workers"]) == 1
        gpu = scalenc.NRBFNClassifier(random_state=0).fit(Xg, y)
        labels = gpu.predict(Xg).compute()
    cpu = scalenc.NRBFNClassifier(random_state=0).fit(X, y)
    cpu64 = scalenc.NRBFNClassifier(random_state=0).fit(X.astype(np.float64), y)
    _assert_same_model(gpu, cpu, np.float32, cpu64, "LocalCUDACluster NRBFNClassifier")
    changed = float(np.mean(labels.get() != cpu.predict(X)))
    _record("LocalCUDACluster NRBFNClassifier predictions changed", changed)
    assert changed <= 1e-3
