"""GPUs (issue 28): the estimators on Dask arrays of CuPy blocks, against the same run's
rates of the GPU.

Rates, measured at the start of the run on the current CUDA device:

* GEMM f32 and GEMM f64: flop/s of an ``--gemm-size``² CuPy matmul (best of 3 after a
  warm-up; CuPy's default math mode, no TF32);
* element-wise: elements per second of ``cupy.exp`` over 2**27 float64;
* sort: elements · log2 p per second of ``cupy.sort(axis=1)`` over float64 rows of p
  (Spearman's ranks);
* read: bytes per second of a bare pass over each Zarr store with its blocks sent to the
  GPU, ``to_device(X, "gpu").sum(axis=0).compute()`` (best of 2 after a warm-up pass that
  fills the page cache), and the host → device copy rate of a pageable NumPy array.

Fits (each timed cold — the first fit of the process compiles CuPy's kernels — and again
warm; the tables give the warm fit and the cold one beside it):

* ``mnist-paper``: nRBFN on MNIST at the paper's parameters (k = 20, t = 0.9, λ = 1e-13,
  the exact soft-KNN, no cap; ``chunk_rows=10000``), the training rows a CuPy array;
* ``mnist-defaults``: ``NRBFNClassifier()`` on the same;
* ``nrbfn``, ``encoder``, ``ccdr``: ``benchmarks/roofline.py``'s fits (every default;
  the encoder with the paper's three kernels) on its simulated Zarr stores, loaded with
  ``device="gpu"``: nRBFN on 1 000 000 × 256 (K = 5), the encoder on 1 000 000 × 50
  (K = 10), CCDRClassifier on 1 000 000 × 256. Each stage's time over its floor, as
  ``roofline.py`` counts the work (its ``run_fit``), with the GPU's rates; and the fit in
  reads of X (fit seconds ÷ one bare read);
* ``ccdr-transform``: CCDR's Nyström extension of every row (``transform``, summed on the
  device so nothing n-sized reaches the host) as seconds, reads, and the share of the
  GEMM rate its products reach.

The 2-core CPU figures these compare with are on the results page (benchmarks/README.md,
"Roofline" and "MNIST at scale").

    python benchmarks/gpu.py --data-dir ../shared/data          # everything
    python benchmarks/gpu.py --only mnist-paper --json gpu.json
    python benchmarks/gpu.py --rows 200000                      # smaller stores
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from roofline import (  # noqa: E402 - the sibling benchmark's stores, work and floors
    Rates,
    make_store,
    open_store,
    read_rate,
    run_fit,
)

import scalenc  # noqa: E402
from scalenc import NRBFNClassifier, to_device  # noqa: E402

PAPER = dict(
    n_neighbors=20, confidence_threshold=0.9, alpha=1e-13, n_candidates=None, max_basis=None
)
FITS = ("mnist-paper", "mnist-defaults", "nrbfn", "encoder", "ccdr", "ccdr-transform")


def _cupy():
    import cupy

    return cupy


def _best(func, repeats=3) -> float:
    cupy = _cupy()
    func()
    cupy.cuda.Device().synchronize()
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        func()
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def gpu_rates(widths, gemm_size: int) -> Rates:
    cupy = _cupy()
    gemm = {}
    for dtype in (np.float32, np.float64):
        a = cupy.random.random((gemm_size, gemm_size)).astype(dtype)
        b = cupy.random.random((gemm_size, gemm_size)).astype(dtype)
        gemm[dtype] = 2 * gemm_size**3 / _best(lambda a=a, b=b: a @ b)
        del a, b
    values = cupy.random.random(2**27)
    elementwise = values.size / _best(lambda v=values: cupy.exp(v))
    del values
    sort = {}
    for p in sorted(set(widths)):
        rows = cupy.random.random((2**24 // p, p))
        sort[p] = (
            rows.size * math.log2(max(p, 2)) / _best(lambda rows=rows: cupy.sort(rows, axis=1))
        )
    cupy.get_default_memory_pool().free_all_blocks()
    return Rates(gemm32=gemm[np.float32], gemm64=gemm[np.float64], elementwise=elementwise,
                 threads=1, sort=sort)  # fmt: skip


def h2d_rate() -> float:
    cupy = _cupy()
    host = np.random.default_rng(0).random(2**27 // 8 * 8).astype(np.float32)
    return host.nbytes / _best(lambda: cupy.asarray(host))


def device_name() -> str:
    cupy = _cupy()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return f"{name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, CuPy {cupy.__version__}"


def mnist(data_dir: Path):
    d = np.load(data_dir / "mnist.npz", allow_pickle=False)
    X, y = (d["X"] / 255.0).astype(np.float32), d["y"]
    return X[d["train_idx"]], y[d["train_idx"]], X[d["test_idx"]], y[d["test_idx"]]


def fit_mnist(setting: str, data_dir: Path, rates: Rates) -> dict:
    cupy = _cupy()
    Xtr, ytr, Xte, yte = mnist(data_dir)
    Xg, Xteg = cupy.asarray(Xtr), cupy.asarray(Xte)
    params = dict(PAPER) if setting == "mnist-paper" else {}
    times = []
    for _ in range(2):  # cold (CuPy compiles its kernels), then warm
        model = NRBFNClassifier(chunk_rows=10000, **params)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            model.fit(Xg, ytr)
            times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    pred = model.predict(Xteg)
    predict_s = time.perf_counter() - t0
    error = 100.0 * float(np.mean(cupy.asnumpy(pred) != yte))
    n, r, p, K = Xtr.shape[0], model.basis_.shape[0], Xtr.shape[1], model.classes_.size
    gram_flops = n * r * (r + 1) + 2 * n * r * K  # the floor's count: the lower triangle
    stages = dict(model.stage_times_)
    knn_flops = 2.0 * n * n * p
    return {
        "fit": setting,
        "fit_s": times[1],
        "cold_fit_s": times[0],
        "predict_s": predict_s,
        "test_error_pct": error,
        "r": int(r),
        "fit_mode_": model.fit_mode_,
        "stages_s": stages,
        "gram_share_of_gemm64": gram_flops / stages["gram"] / rates.gemm64,
        "soft_knn_share_of_gemm32": (
            knn_flops / stages["soft_knn"] / rates.gemm32
            if model.memory_plan_["soft_knn"]["n_candidates"] is None
            else None
        ),
        "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught}),
    }


def fit_store(name: str, path: Path, K: int, rates: Rates) -> dict:
    store, X, y = open_store(path, K)
    Xg = to_device(X, "gpu")
    read, seconds = read_rate(Xg, 2)
    cold = run_fit(name, store, Xg, y, rates, read)
    fit = run_fit(name, store, Xg, y, rates, read)
    fit.update(cold_fit_s=cold["fit_s"], read_s=seconds, read_rate=read,
               reads=fit["fit_s"] / seconds)  # fmt: skip
    return fit


def ccdr_transform(path: Path, K: int, rates: Rates) -> dict:
    store, X, y = open_store(path, K)
    Xg = to_device(X, "gpu")
    read, seconds = read_rate(Xg, 2)
    model = scalenc.CCDR(random_state=0).fit(Xg, y)
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        model.transform(Xg).sum(axis=0).compute()
        out.append(time.perf_counter() - t0)
    s, p = sum(sol.indices.size for sol in model.solutions_), store.p
    flops = 2.0 * store.n * s * p
    return {
        "fit": "ccdr-transform",
        "shape": store.shape(),
        "transform_s": out[1],
        "cold_transform_s": out[0],
        "read_s": seconds,
        "reads": out[1] / seconds,
        "subsample_rows": int(s),
        "gemm32_share": flops / out[1] / rates.gemm32,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=FITS, default=list(FITS))
    parser.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    parser.add_argument("--workdir", default="/tmp/scalenc_gpu")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=131_072)
    parser.add_argument("--gemm-size", type=int, default=8192)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = {"device": device_name(), "fits": []}
    print(f"device: {results['device']}", flush=True)
    stores = {}
    with dask.config.set(scheduler="threads"):
        if {"nrbfn", "ccdr", "ccdr-transform"} & set(args.only):
            stores["p256"] = make_store(Path(args.workdir), args.rows, 256, 5, args.chunk_rows)
        if "encoder" in args.only:
            stores["p50"] = make_store(Path(args.workdir), args.rows, 50, 10, args.chunk_rows)
        rates = gpu_rates([50, 256], args.gemm_size)
        results["rates"] = asdict(rates)
        results["h2d_rate"] = h2d_rate()
        print(f"rates: GEMM f32 {rates.gemm32 / 1e12:.1f} TFLOP/s, f64 {rates.gemm64 / 1e12:.1f}"
              f" TFLOP/s, exp {rates.elementwise / 1e9:.0f} G/s, host→device "
              f"{results['h2d_rate'] / 1e9:.1f} GB/s", flush=True)  # fmt: skip
        for name in args.only:
            t0 = time.perf_counter()
            if name.startswith("mnist"):
                fit = fit_mnist(name, Path(args.data_dir), rates)
            elif name == "ccdr-transform":
                fit = ccdr_transform(stores["p256"], 5, rates)
            else:
                path, K = (stores["p50"], 10) if name == "encoder" else (stores["p256"], 5)
                fit = fit_store(name, path, K, rates)
            fit.setdefault("fit", name)
            results["fits"].append(fit)
            brief = {k: v for k, v in fit.items() if k not in ("stages", "warnings")}
            print(f"{name} ({time.perf_counter() - t0:.0f} s): {json.dumps(brief, default=str)}",
                  flush=True)  # fmt: skip
            for stage in fit.get("stages", []):
                ratio = stage["ratio"]
                print(f"    {stage['stage']}: {stage['seconds']:.3f} s, "
                      f"{'–' if ratio is None else f'{ratio:.2f}'}× floor ({stage['bound']})")  # fmt: skip
            for w in fit.get("warnings", []):
                print(f"    warning: {w}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
