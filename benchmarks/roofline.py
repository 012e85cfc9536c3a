"""Roofline of the fits (issue 26): each fit stage's time over the floor that this machine's
own rates, measured in the same run, put under it.

Rates, measured at the start of the run (and printed):

* read: bytes per second of a bare pass over each Zarr store, ``X.sum(axis=0).compute()``
  on the run's scheduler as ``encoder_scale.py`` does (one warm-up pass, then the best of
  ``--read-repeats``), once per store;
* GEMM f32 and GEMM f64: flop/s of a ``--gemm-size``² matmul on all cores, best of 3
  (``nrbfn_scale.blas_peak``);
* element-wise: elements per second of ``np.exp`` over a large float64 array, one part
  per core on a thread pool (as Dask's threads run blocks), in tiles of 32 768 elements
  that stay in cache;
* sort: elements · log2 p per second of ``np.sort(axis=1)`` on float64 rows of p values
  (the Spearman kernel's ranks), threaded the same way, for each p of the grid.

With ``--scheduler cluster`` the same three compute rates are also measured on one thread
(BLAS limited to one thread with threadpoolctl, one thread of ``np.exp`` and of
``np.sort``), and the floors use the cluster's rates: workers × the one-thread rate, as
each of the 2 workers runs one task at a time with one BLAS thread (the all-core rates
are printed and kept in the JSON beside them). Each cluster fit also records Dask's task
stream: per task prefix, the seconds the workers spent computing and fetching
dependencies from each other (``transfer``: the partials sent over TCP to the merges of
the reduction tree), and the fit's wall seconds in transfers; nRBFN's ``gram`` pass sends
at most one r×r float64 partial per row block (``gram_partial_mb`` in the JSON).

The floor of a stage is max(read time, compute time): read time = the bytes the stage
reads from the store (X's n·p·itemsize per pass over X; a gather of rows reads the blocks
that hold them; the encoder's cached embedding counts its bytes once written and once
read back) over the read rate, and compute time = Σ flops / the GEMM rate of their
precision + element-wise operations / the element-wise rate + sort work / the sort rate.
A stage that does no work (nRBFN's ``cv`` with one λ) has no floor and no ratio. The
"whole fit" row is the fit's wall seconds (stages, and what runs between them) over the
sum of its stages' floors. The work counted per stage (n labeled rows, p features, K
classes; float32 data, whose products run in float32 where the code does so):

* NRBFNClassifier() (c soft-KNN candidates, r basis rows): ``soft_knn`` — a pass over X
  and a gather of the candidate (all-rows mode: basis) rows; products 2·n·c·p (all-rows
  mode: p·(n² + Σ_b b²), one product per block pair) and n·c compares (n²);
  ``sigma`` — a pass, 2·n·r·p products, n·r square roots; ``gram`` — a pass, 2·n·r·p
  products, n·r exponentials, n·r(r+1) float64 flops for ΦᵀΦ (its lower triangle) and
  2·n·r·K for ΦᵀY; ``cv`` — a pass scoring the λ grid (none with the default one λ);
  ``solve`` — Cholesky r³/3, the pivoted Cholesky of the rank r³/3 (r ≤ 4096) and
  4·K·r² float64 flops.
* EncoderClassifier with the paper's three kernels (linear, euclidean, spearman; M = 3):
  ``class_means`` — a pass, class sums 2·n·K·p float64, n·p conversions; ``embedding`` —
  a pass, X·Uᵀ 2·n·K·p float64 (shared by linear and euclidean) and Spearman's
  2·n·K·p, ranks n·p·log2 p of sorting, 4·n·p + M·n·K element-wise (float64 copy, row
  norms, rank scatter and centring, the kernels' outputs), Z's class sums 2·n·K·MK and
  scatters M·2·n·K² float64, plus Z's n·M·K·8 bytes written when the plan caches it;
  ``cross_entropy`` — the LDA scores M·2·n·K·C float64 (C = 1 for two classes, else K)
  and M·n·K exponentials, over the cached Z (its bytes read back) or over X again with
  the kernels' work. ``--estimators encoder_linear`` adds the default one-kernel fit:
  one pass with the scatter of [X | onehot], n·(p+K)(p+K+1) flops in X's precision.
* CCDRClassifier() (s subsample rows, B = 1 subsample, m components, L = K classes):
  ``draw`` — two passes over the labels (n·8 bytes each); ``gather`` — a pass over X
  with its NaN/inf count (n·p element-wise); ``solve`` — the subsample's k-NN graph
  2·s²·p float64 and s² compares, and for ``n_components="auto"`` each class's k-NN
  (2·s_k²·p); the sparse eigen-solve is not counted (the floor is lower than it);
  the solve runs with one BLAS thread, against an all-core GEMM rate; ``extension`` —
  a pass over X with every row's k-NN in S, 2·n·s·p products in X's precision and n·s
  compares, and the head's statistics 2·n·(m+1)(m+1+L) float64 (when S is all of X: no
  pass, S's own float64 rows embedded, n = s).

The grid: EncoderClassifier on p × K ∈ {16, 50, 256} × {2, 10} at n = 1 000 000
(``--quick``: 50 000); NRBFNClassifier and CCDRClassifier with every default on
n ∈ {200 000, 1 000 000} × p ∈ {32, 256}, K = 5 (``--quick``: n = 20 000). Data:
``scalenc.simulate.simulate("uniform_noise", ...)``, float32, one Zarr store per shape
written once under ``--workdir`` and reused. ``--scheduler cluster`` runs on a
LocalCluster of 2 workers × 1 thread × ``--memory-limit``.

    python benchmarks/roofline.py                         # the grid, threaded scheduler
    python benchmarks/roofline.py --scheduler cluster     # the same on the LocalCluster
    python benchmarks/roofline.py --quick --json roofline.json
    python benchmarks/roofline.py --rows 3000 --features 8 --encoder-classes 3 --classes 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import dask
import dask.array as da
import numpy as np
from dask.system import CPU_COUNT
from dask.utils import key_split
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
from encoder_scale import cpu_seconds  # noqa: E402 - the sibling benchmark's CPU clock
from nrbfn_scale import blas_peak  # noqa: E402 - the sibling benchmark's GEMM rate

import scalenc  # noqa: E402
from scalenc import CCDRClassifier, EncoderClassifier, NRBFNClassifier, load  # noqa: E402
from scalenc.encoder.kernels import Euclidean, Gaussian, Linear, Spearman  # noqa: E402
from scalenc.simulate import simulate  # noqa: E402

THREE = ("linear", "euclidean", "spearman")
ENCODER_P, ENCODER_K, ENCODER_N, ENCODER_N_QUICK = (16, 50, 256), (2, 10), 1_000_000, 50_000
OTHER_P, OTHER_N, OTHER_N_QUICK = (32, 256), (200_000, 1_000_000), (20_000,)
ESTIMATORS = ("encoder", "nrbfn", "ccdr", "encoder_linear")
BOUNDS = ("read", "GEMM f32", "GEMM f64", "element-wise", "sort")
WORKERS = 2  # the LocalCluster of --scheduler cluster: workers × 1 thread each


# --- machine rates -------------------------------------------------------------------------


def _best_of(func, repeats: int = 3) -> float:
    func()  # warm-up
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - t0)
    return best


def _on_every_core(work, threads: int) -> float:
    """Best wall seconds of ``work(i)`` for i < threads, run together on a thread pool."""
    with ThreadPoolExecutor(threads) as pool:
        return _best_of(lambda: list(pool.map(work, range(threads))))


def elementwise_rate(threads: int, per_thread: int = 2**22, tile: int = 2**15) -> float:
    """Elements per second of ``np.exp`` on float64, each thread streaming its own large
    array through a cache-sized output tile."""
    arrays = [np.random.default_rng(i).random(per_thread) for i in range(threads)]
    outs = [np.empty(tile) for _ in range(threads)]

    def work(i):
        a, out = arrays[i], outs[i]
        for start in range(0, a.size, tile):
            part = a[start : start + tile]
            np.exp(part, out=out[: part.size])

    return threads * per_thread / _on_every_core(work, threads)


def sort_rate(p: int, threads: int, per_thread: int = 2**20) -> float:
    """Elements · log2 p per second of ``np.sort(axis=1)`` on float64 rows of p values."""
    rows = max(1, per_thread // p)
    arrays = [np.random.default_rng(i).random((rows, p)) for i in range(threads)]
    seconds = _on_every_core(lambda i: np.sort(arrays[i], axis=1), threads)
    return threads * rows * p * math.log2(max(p, 2)) / seconds


@dataclass
class Rates:
    gemm32: float  # flop/s
    gemm64: float
    elementwise: float  # elements/s
    threads: int
    sort: dict  # p → elements·log2 p per second
    label: str = "all cores"

    @classmethod
    def measure(cls, widths, gemm_size: int, threads: int | None = None) -> Rates:
        """The rates on ``threads`` threads (all cores by default; one: BLAS limited to
        one thread)."""
        threads = threads or CPU_COUNT
        single = threads == 1
        with threadpool_limits(1) if single else contextlib.nullcontext():
            rates = cls(
                gemm32=blas_peak(np.float32, size=gemm_size) * 1e9,
                gemm64=blas_peak(np.float64, size=gemm_size) * 1e9,
                elementwise=elementwise_rate(threads),
                threads=threads,
                sort={},
                label="one thread" if single else "all cores",
            )
            for p in sorted(set(widths)):
                rates.sort[p] = sort_rate(p, threads)
        return rates

    def times(self, workers: int) -> Rates:
        """``workers`` copies of these rates side by side (a cluster of one-thread workers)."""
        return Rates(
            gemm32=self.gemm32 * workers,
            gemm64=self.gemm64 * workers,
            elementwise=self.elementwise * workers,
            threads=self.threads * workers,
            sort={p: r * workers for p, r in self.sort.items()},
            label=f"{workers} workers × {self.label}",
        )

    def describe(self) -> str:
        sorts = ", ".join(f"p={p}: {r / 1e9:.2f}" for p, r in self.sort.items())
        return (
            f"GEMM f32 {self.gemm32 / 1e9:.1f} GFLOP/s, GEMM f64 {self.gemm64 / 1e9:.1f} "
            f"GFLOP/s, element-wise (np.exp, {self.threads} threads) "
            f"{self.elementwise / 1e9:.2f} G/s, sort (np.sort rows) {sorts} G·log2 p/s "
            f"({self.label})"
        )


# --- work and floors -----------------------------------------------------------------------


@dataclass
class Work:
    """What one stage must do at least: bytes read, flops by precision, element-wise
    operations, and sort work (elements · log2 of the row width ``sort_p``)."""

    bytes: float = 0.0
    f32: float = 0.0
    f64: float = 0.0
    elementwise: float = 0.0
    sort: float = 0.0
    sort_p: int = 0

    def seconds(self, rates: Rates, read_rate: float) -> dict:
        return {
            "read": self.bytes / read_rate,
            "GEMM f32": self.f32 / rates.gemm32,
            "GEMM f64": self.f64 / rates.gemm64,
            "element-wise": self.elementwise / rates.elementwise,
            "sort": self.sort / rates.sort[self.sort_p] if self.sort else 0.0,
        }

    def floor(self, rates: Rates, read_rate: float) -> tuple[float, str, dict]:
        """max(read time, compute time), what bounds it, and every term's seconds."""
        terms = self.seconds(rates, read_rate)
        compute = {k: v for k, v in terms.items() if k != "read"}
        total = sum(compute.values())
        if max(terms["read"], total) == 0:
            return 0.0, "none", terms
        if terms["read"] >= total:
            return terms["read"], "read", terms
        return total, max(compute, key=compute.get), terms


def products(work: Work, dtype, flops: float) -> Work:
    """``work`` with ``flops`` of matrix products in ``dtype``'s precision (f32 or f64)."""
    if np.dtype(dtype) == np.float32:
        work.f32 += flops
    else:
        work.f64 += flops
    return work


@dataclass
class Store:
    path: Path
    n: int
    p: int
    K: int
    n_labeled: int
    chunks: tuple
    x_itemsize: int
    y_itemsize: int
    x_dtype: str

    @property
    def x_bytes(self) -> float:
        return float(self.n) * self.p * self.x_itemsize

    def touched_bytes(self, index) -> float:
        """Bytes of the row blocks of X that hold the rows ``index`` (a gather)."""
        bounds = np.cumsum(self.chunks)
        blocks = np.unique(np.searchsorted(bounds, np.asarray(index), side="right"))
        return float(sum(self.chunks[b] for b in blocks)) * self.p * self.x_itemsize

    def shape(self) -> str:
        return f"{self.n:,} × {self.p}, K={self.K}"


def nrbfn_work(model, store: Store) -> dict:
    n, p, K, dt = float(store.n_labeled), store.p, model.classes_.size, store.x_dtype
    r = float(model.basis_.shape[0])
    all_rows = model.memory_plan_["soft_knn"]["n_candidates"] is None
    c = float(model.candidate_indices_.size)
    if all_rows:  # block pairs: one product per pair, the diagonal blocks alone
        knn = Work(bytes=store.x_bytes + store.touched_bytes(model.basis_indices_))
        products(knn, dt, p * (n * n + sum(float(b) ** 2 for b in store.chunks)))
        knn.elementwise = n * n
    else:
        knn = Work(bytes=store.x_bytes + store.touched_bytes(model.candidate_indices_))
        products(knn, dt, 2 * n * c * p)
        knn.elementwise = n * c
    sigma = products(Work(bytes=store.x_bytes, elementwise=n * r), dt, 2 * n * r * p)
    gram = products(
        Work(bytes=store.x_bytes, elementwise=n * r, f64=n * r * (r + 1) + 2 * n * r * K),
        dt,
        2 * n * r * p,
    )
    cv = Work()
    if getattr(model, "cv_error_", None) is not None:
        grid = model.cv_error_.size
        cv = products(
            Work(bytes=store.x_bytes, elementwise=n * r, f64=2 * n * r * K * grid),
            dt,
            2 * n * r * p,
        )
    rank = r**3 / 3 if getattr(model, "rank_", None) is not None else 0.0
    solve = Work(f64=r**3 / 3 + rank + 4 * K * r * r)
    return {"soft_knn": knn, "sigma": sigma, "gram": gram, "cv": cv, "solve": solve}


def _kernel_work(kernels, store: Store, n: float, K: int) -> Work:
    """The embedding Z = [δ_1(X, U) | … | δ_M(X, U)] of n rows."""
    p, M = store.p, len(kernels)
    work = Work(elementwise=n * p + M * n * K)  # the float64 copy, the kernels' outputs
    if any(isinstance(k, (Linear, Euclidean, Gaussian)) for k in kernels):
        work.f64 += 2 * n * K * p  # X·Uᵀ, shared
    if any(isinstance(k, (Euclidean, Gaussian)) for k in kernels):
        work.elementwise += n * p  # the rows' squared norms
    if any(isinstance(k, Spearman) for k in kernels):
        work.f64 += 2 * n * K * p
        work.elementwise += 2 * n * p  # the ranks scattered, and centred
        work.sort, work.sort_p = n * p * math.log2(max(p, 2)), p
    return work


def _add(*works: Work) -> Work:
    total = Work(sort_p=max(w.sort_p for w in works))
    for w in works:
        for key in ("bytes", "f32", "f64", "elementwise", "sort"):
            setattr(total, key, getattr(total, key) + getattr(w, key))
    return total


def encoder_work(model, store: Store) -> dict:
    n, p, K = float(store.n_labeled), store.p, model.classes_.size
    kernels, plan = model.kernels_, model.fit_plan_["name"]
    M = len(kernels)
    C = 1 if K == 2 else K
    if plan == "one_pass":  # the symmetric product of [X | onehot]
        means = products(Work(bytes=store.x_bytes), store.x_dtype, n * (p + K) * (p + K + 1))
        return {"class_means": means}
    means = Work(bytes=store.x_bytes, f64=2 * n * K * p, elementwise=n * p)
    moments = Work(f64=2 * n * K * (M * K) + M * 2 * n * K * K)
    scores = Work(f64=M * 2 * n * K * C, elementwise=M * n * K)
    z_bytes = n * M * K * 8
    out = {"class_means": means}
    embedding = _add(Work(bytes=store.x_bytes), _kernel_work(kernels, store, n, K), moments)
    if plan == "cache":
        embedding.bytes += z_bytes  # Z written once
        out["embedding"] = embedding
        out["cross_entropy"] = _add(Work(bytes=z_bytes), scores)
    else:
        out["embedding"] = embedding
        if M > 1:
            out["cross_entropy"] = _add(
                Work(bytes=store.x_bytes), _kernel_work(kernels, store, n, K), scores
            )
    return out


def ccdr_work(model, store: Store) -> dict:
    n, p, L = float(store.n), store.p, model.classes_.size
    sols = model.ccdr_.solutions_
    B, s, m = len(sols), float(sols[0].indices.size), model.n_components_
    draw = Work(bytes=2 * n * store.y_itemsize, elementwise=2 * n)
    gather = Work(bytes=store.x_bytes, elementwise=n * p)
    solve = Work()
    for b, sol in enumerate(sols):
        size = float(sol.indices.size)
        solve.f64 += 2 * size * size * p
        solve.elementwise += size * size
        if b == 0 and model.intrinsic_dimension_ is not None:
            per_class = np.bincount(sol.codes[sol.codes >= 0], minlength=L).astype(float)
            solve.f64 += 2 * p * float(np.sum(per_class**2))
            solve.elementwise += float(np.sum(per_class**2))
    head = 2 * (m + 1) * (m + 1 + L)
    if B == 1 and s == n:  # S is all of X: its float64 rows embedded, no pass over X
        rows, extension, dtype = s, Work(), np.float64
    else:
        rows, extension, dtype = float(store.n_labeled), Work(bytes=store.x_bytes), store.x_dtype
    extension.elementwise, extension.f64 = rows * s * B, rows * head
    products(extension, dtype, 2 * rows * s * p * B)
    return {"draw": draw, "gather": gather, "solve": solve, "extension": extension}


# --- stores and fits -----------------------------------------------------------------------


def make_store(workdir: Path, n: int, p: int, K: int, chunk_rows: int) -> Path:
    """The simulated store of this shape, written once (under the threaded scheduler)."""
    chunk = min(chunk_rows, max(1000, -(-n // 8)))  # small stores still get several blocks
    path = Path(workdir) / f"uniform_noise-n{n}-p{p}-K{K}-c{chunk}-s0.zarr"
    if not (path / "y" / "zarr.json").exists():
        print(f"writing {n:,} × {p} float32, K={K} ({n * p * 4 / 1e9:.2f} GB) to {path}")
        X, y = simulate("uniform_noise", n, p, K, random_state=0, chunk_rows=chunk)
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            da.to_zarr(X, str(path), component="X", overwrite=True)
            da.to_zarr(y, str(path), component="y", overwrite=True)
        print(f"  written in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


def open_store(path: Path, K: int) -> tuple[Store, da.Array, da.Array]:
    X, y = load(path)
    (n_labeled,) = dask.compute((y >= 0).sum())
    store = Store(
        path=path,
        n=int(X.shape[0]),
        p=int(X.shape[1]),
        K=K,
        n_labeled=int(n_labeled),
        chunks=tuple(int(c) for c in X.chunks[0]),
        x_itemsize=int(X.dtype.itemsize),
        y_itemsize=int(y.dtype.itemsize),
        x_dtype=str(X.dtype),
    )
    return store, X, y


def read_rate(X: da.Array, repeats: int) -> tuple[float, float]:
    """(bytes per second, seconds) of the best of ``repeats`` bare passes after a warm-up."""
    X.sum(axis=0).compute()  # the page cache: every pass then reads the store from memory
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        X.sum(axis=0).compute()
        best = min(best, time.perf_counter() - t0)
    return X.nbytes / best, best


MAKERS = {
    # the paper's passes over every row (encoder_work's floors), not the sampled choice
    "encoder": (lambda: EncoderClassifier(kernels=THREE, choice_sample=None), encoder_work),
    "encoder_linear": (lambda: EncoderClassifier(kernels=("linear",)), encoder_work),
    "nrbfn": (lambda: NRBFNClassifier(random_state=0), nrbfn_work),
    "ccdr": (lambda: CCDRClassifier(random_state=0), ccdr_work),
}


def task_stream_summary(records) -> dict:
    """Per task prefix: tasks, the workers' compute and transfer seconds, and the bytes of
    the tasks' results; and the wall seconds during which some worker was fetching."""
    prefixes, spans = {}, []
    for rec in records:
        row = prefixes.setdefault(
            key_split(rec["key"]), {"tasks": 0, "compute_s": 0.0, "transfer_s": 0.0, "nbytes": 0}
        )
        row["tasks"] += 1
        row["nbytes"] += int(rec.get("nbytes") or 0)
        for ss in rec.get("startstops", ()):
            if ss["action"] in ("compute", "transfer"):
                row[f"{ss['action']}_s"] += ss["stop"] - ss["start"]
            if ss["action"] == "transfer":
                spans.append((ss["start"], ss["stop"]))
    wall, end = 0.0, -np.inf
    for start, stop in sorted(spans):  # the union of the transfer intervals
        wall += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return {"prefixes": prefixes, "transfer_wall_s": wall}


def run_fit(name: str, store: Store, X, y, rates: Rates, read: float, client=None) -> dict:
    make, work_of = MAKERS[name]
    model = make()
    if client is not None:
        from distributed import get_task_stream

        stream = get_task_stream(client)
    else:
        stream = contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, stream as recorded:
        warnings.simplefilter("always")
        c0, t0 = cpu_seconds(), time.perf_counter()
        model.fit(X, y)
        fit_s, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    works = work_of(model, store)
    stages, by_bound, total_floor = [], dict.fromkeys(BOUNDS, 0.0), 0.0
    for stage, seconds in model.stage_times_.items():
        work = works.get(stage, Work())
        floor, bound, terms = work.floor(rates, read)
        stages.append(
            {
                "stage": stage,
                "seconds": seconds,
                "floor_s": floor,
                "ratio": seconds / floor if floor > 0 else None,
                "bound": bound,
                "terms_s": terms,
                "work": asdict(work),
            }
        )
        total_floor += floor
        if bound in by_bound:
            by_bound[bound] += floor
    info = {"n_passes_": int(model.n_passes_)}
    if name == "nrbfn":
        r = int(model.basis_.shape[0])
        info["gram_partial_mb"] = len(store.chunks) * r * r * 8 / 1e6
        info.update(
            r=int(model.basis_.shape[0]),
            c=int(model.candidate_indices_.size),
            soft_knn=model.memory_plan_["soft_knn"]["mode"],
            fit_mode_=model.fit_mode_,
        )
    elif name.startswith("encoder"):
        info.update(plan=model.fit_plan_["name"], kernel=model.kernel_.name)
    else:
        info.update(s=int(model.subsample_indices_.size), m=int(model.n_components_))
    if client is not None:
        info["task_stream"] = task_stream_summary(recorded.data)
    return {
        "estimator": name,
        "shape": store.shape(),
        "n": store.n,
        "p": store.p,
        "K": store.K,
        "fit_s": fit_s,
        "cores_used": cpu / fit_s if fit_s > 0 else None,
        "outside_stages_s": fit_s - sum(model.stage_times_.values()),
        "stages": stages,
        "whole_floor_s": total_floor,
        "whole_ratio": fit_s / total_floor if total_floor > 0 else None,
        "whole_bound": max(by_bound, key=by_bound.get) if total_floor > 0 else "none",
        "info": info,
        "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught}),
    }


def shapes(args) -> list[tuple[str, int, int, int]]:
    """(estimator, n, p, K) of the run, in the order they are fitted."""
    out = []
    for name in args.estimators:
        if name.startswith("encoder"):
            rows = [args.rows] if args.rows else [ENCODER_N_QUICK if args.quick else ENCODER_N]
            for n in rows:
                for p in args.features or ENCODER_P:
                    for K in args.encoder_classes:
                        out.append((name, n, p, K))
        else:
            rows = [args.rows] if args.rows else (OTHER_N_QUICK if args.quick else OTHER_N)
            for n in rows:
                for p in args.features or OTHER_P:
                    out.append((name, n, p, args.classes))
    return out


@contextlib.contextmanager
def scheduler(args):
    if args.scheduler == "cluster":
        with scalenc.connect(
            "local", n_workers=2, threads_per_worker=1, memory_limit=args.memory_limit, quiet=True
        ) as client:
            yield client
    else:
        with scalenc.connect("threads") as client:
            yield client


def run(args) -> dict:
    plan = shapes(args)
    paths = {}
    for _, n, p, K in plan:  # every store written before any timing
        if (n, p, K) not in paths:
            paths[n, p, K] = make_store(Path(args.workdir), n, p, K, args.chunk_rows)
    widths = [p for _, _, p, _ in plan]
    rates = all_cores = Rates.measure(widths, args.gemm_size)
    print(f"\nmachine rates: {rates.describe()}", flush=True)
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    if blas and min(blas) < CPU_COUNT:  # e.g. OMP_NUM_THREADS=1 set before the run
        print(f"warning: BLAS runs {min(blas)} thread(s) on {CPU_COUNT} cores (its thread "
              "count is fixed when NumPy loads: OMP_NUM_THREADS or OPENBLAS_NUM_THREADS "
              "set?), so the all-core GEMM rates above, and the threaded run's floors, are "
              "those of fewer cores", flush=True)  # fmt: skip
    if args.scheduler == "cluster":  # each worker: one task at a time, one BLAS thread
        one = Rates.measure(widths, args.gemm_size, threads=1)
        print(f"machine rates: {one.describe()}", flush=True)
        rates = one.times(WORKERS)
        print(f"floors use {rates.describe()}", flush=True)
    results = {
        "scheduler": args.scheduler,
        "memory_limit": args.memory_limit if args.scheduler == "cluster" else None,
        "rates": asdict(rates),
        "rates_all_cores": asdict(all_cores),
        "reads": [],
        "fits": [],
        "load_average": os.getloadavg(),
    }
    with scheduler(args) as client:
        client = client if args.scheduler == "cluster" else None
        for key, path in paths.items():
            store, X, y = open_store(path, key[2])
            read, seconds = read_rate(X, args.read_repeats)
            results["reads"].append(
                {"shape": store.shape(), "bytes": store.x_bytes, "seconds": seconds, "rate": read}
            )
            print(f"{store.shape()}: read {store.x_bytes / 1e9:.3f} GB in {seconds:.3f} s = "
                  f"{read / 1e9:.2f} GB/s", flush=True)  # fmt: skip
            for name, n, p, K in plan:
                if (n, p, K) != key:
                    continue
                fits = [
                    run_fit(name, store, X, y, rates, read, client) for _ in range(args.repeats)
                ]
                fit = min(fits, key=lambda f: f["fit_s"])
                fit["read_rate"] = read
                results["fits"].append(fit)
                ratio = fit["whole_ratio"]
                print(f"  {name}: fit {fit['fit_s']:.2f} s on {fit['cores_used']:.2f} cores "
                      f"({fit['outside_stages_s']:.2f} s outside the stages), "
                      f"{'–' if ratio is None else f'{ratio:.1f}'}× its floor; "
                      f"{ {k: v for k, v in fit['info'].items() if k != 'task_stream'} }",
                      flush=True)  # fmt: skip
                if "task_stream" in fit["info"]:
                    print_transfers(fit)
    results["load_average_after"] = os.getloadavg()
    return results


def print_transfers(fit: dict) -> None:
    ts = fit["info"]["task_stream"]
    rows = sorted(ts["prefixes"].items(), key=lambda kv: -kv[1]["transfer_s"])
    print(f"    transfers: {ts['transfer_wall_s']:.2f} s of the fit's wall time; by task "
          "(tasks, compute s, transfer s, result MB): "
          + "; ".join(f"{k} {v['tasks']}, {v['compute_s']:.2f}, {v['transfer_s']:.2f}, "
                      f"{v['nbytes'] / 1e6:.0f}" for k, v in rows[:6]), flush=True)  # fmt: skip


def _num(x) -> str:
    return "–" if x is None else f"{x:.3g}"


def print_table(results: dict) -> None:
    r = results["rates"]
    print(f"\nscheduler: {results['scheduler']}"
          + (f" (2 workers × 1 thread × {results['memory_limit']})"
             if results["scheduler"] == "cluster" else ""))  # fmt: skip
    a = results["rates_all_cores"]
    if a != r:
        print(f"all cores: GEMM f32 {a['gemm32'] / 1e9:.1f} GFLOP/s, GEMM f64 "
              f"{a['gemm64'] / 1e9:.1f} GFLOP/s, element-wise {a['elementwise'] / 1e9:.2f} G/s "
              "(not used by the floors)")  # fmt: skip
    print(f"floors: {r['label']}: GEMM f32 {r['gemm32'] / 1e9:.1f} GFLOP/s, GEMM f64 "
          f"{r['gemm64'] / 1e9:.1f} GFLOP/s, element-wise {r['elementwise'] / 1e9:.2f} G/s; read rates: "
          + "; ".join(f"{x['shape']} {x['rate'] / 1e9:.2f} GB/s" for x in results["reads"]))  # fmt: skip
    print("\n| estimator | shape | stage | seconds | floor s | time ÷ floor | floor bound |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for fit in results["fits"]:
        for st in fit["stages"]:
            print(f"| {fit['estimator']} | {fit['shape']} | {st['stage']} | {st['seconds']:.3g} "
                  f"| {_num(st['floor_s'] or None)} | {_num(st['ratio'])} | {st['bound']} |")  # fmt: skip
        print(f"| {fit['estimator']} | {fit['shape']} | **whole fit** | {fit['fit_s']:.3g} | "
              f"{_num(fit['whole_floor_s'] or None)} | {_num(fit['whole_ratio'])} | "
              f"{fit['whole_bound']} |")  # fmt: skip
    for fit in results["fits"]:
        for w in fit["warnings"]:
            print(f"{fit['estimator']} {fit['shape']}: {w}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--estimators", nargs="+", choices=ESTIMATORS,
                        default=["encoder", "nrbfn", "ccdr"])  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="encoder at n = 50 000, nRBFN and CCDR at n = 20 000")  # fmt: skip
    parser.add_argument("--rows", type=int, help="every estimator at this n instead")
    parser.add_argument("--features", type=int, nargs="+", help="these p instead of the grid's")
    parser.add_argument("--encoder-classes", type=int, nargs="+", default=list(ENCODER_K))
    parser.add_argument("--classes", type=int, default=5, help="K of nRBFN's and CCDR's stores")
    parser.add_argument("--chunk-rows", type=int, default=32_768)
    parser.add_argument("--gemm-size", type=int, help="matmul side (default 4096, quick 2048)")
    parser.add_argument("--read-repeats", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="fits per shape (the fastest)")
    parser.add_argument("--workdir", default="/tmp/scalenc_roofline")
    parser.add_argument("--scheduler", choices=["threads", "cluster"], default="threads")
    parser.add_argument("--memory-limit", default="1GiB", help="per worker (cluster)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.gemm_size is None:
        args.gemm_size = 2048 if args.quick else 4096
    results = run(args)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
