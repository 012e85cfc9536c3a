"""The encoder's fit plan for several kernels: cache the embedding Z, or compute it again.

Pure NumPy, no dask. After pass 1 (the class means) the multi-kernel fit needs Z twice:
for its class moments (pass 2) and for the cross-entropy (pass 3). Z is either written
in pass 2 and read back in pass 3 (plan ``"cache"``: 2 passes over X and one over Z), or
evaluated again from X in pass 3 (plan ``"recompute"``: 3 passes over X, nothing
stored). Which is cheaper depends on the shape: Z has M·K columns against X's p, so for
small p and many classes the cache is many times larger than X (p = 16, K = 100, three
kernels: 37×), while for large p it is a small fraction of it.

The choice is made from measured costs, per row of X:

* ``read``: pass 1's own wall time over n (a read of X plus the class sums, on this data
  and this scheduler — what a third pass over X at least costs);
* ``kernels``: the kernels evaluated on a sample block (rows drawn around U, in X's
  dtype), timed on this machine at fit time, over the cores;
* ``cache``: M·K·8 bytes written and read back once, at the rate measured once per
  process by :func:`cache_seconds_per_byte` (``.npy`` writes to and memory-mapped reads
  from Dask's temporary directory, one thread per core).

All three are wall-clock seconds with every core busy. They are rough (this machine's
other load moves them by tens of percent), so the choice matters where the two plans
differ by a factor — Z several times larger than X, or much smaller — and there it is
robust.

``recompute`` costs ``read + kernels``; ``cache`` costs ``cache``. The numbers that chose
are kept in the estimator's ``fit_plan_``. An embedding of at most
:data:`SMALL_CACHE_BYTES` is cached unmeasured.

Before cost, memory (:func:`cache_memory_refusal`): the cache holds a whole block of Z in
the task that computes it (M·K·8 bytes a row against X's p·itemsize: 37× X's block for
p = 16, K = 100 and three kernels) and all of Z on the workers (distributed, where it is
persisted and spilled) or on the temporary directory's disk (local). The recompute plan
works through a block in row tiles and stores nothing, so it is taken whenever the cache
would not fit: a worker paused at Dask's memory threshold with nothing it can spill
waits for ever.

Only the linear kernel admits a shortcut that avoids Z altogether: Z = X Uᵀ is linear in
x, so Z's class means are U Uᵀ rows and its pooled scatter U S_w Uᵀ, from pass 1's p×p
scatter (the one-pass linear fit). Euclidean (−‖x − u‖), Spearman (ranks) and Gaussian
(exp of a squared distance) are not linear in x, and their class moments need the rows
themselves.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import numpy as np

from scalenc.encoder.kernels import embed
from scalenc.engine.cluster import task_threads, uses_distributed

__all__ = [
    "fit_plan",
    "cache_room",
    "cache_seconds_per_byte",
    "kernel_seconds_per_row",
    "choose_cache_plan",
    "cache_memory_refusal",
    "SMALL_CACHE_BYTES",
]


#: Rows of the sample block on which the kernels are timed, at most
#: :data:`SAMPLE_ELEMENTS` elements (wide rows: fewer rows, so that timing the kernels
#: costs a small share of a pass; at p = 1024 the 2048-row sample took 0.15 s a fit).
SAMPLE_ROWS = 2048
SAMPLE_ELEMENTS = 2**19


#: An embedding of at most this many bytes (where memory allows) is cached without
#: measuring the rates: its
#: write and read cost microseconds, and measuring them about 2 ms, a fifth of the fit of
#: iris (150 rows, three kernels: 10.8 kB).
SMALL_CACHE_BYTES = 2**20


def sample_rows(n_features: int) -> int:
    """Rows of the timing sample for rows of ``n_features`` (at least 64)."""
    return int(min(SAMPLE_ROWS, max(64, SAMPLE_ELEMENTS // max(n_features, 1))))


def _best_of(func, repeats: int = 3) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


@functools.lru_cache(maxsize=1)
def cache_seconds_per_byte() -> float:
    """Seconds per byte to write a block of Z as ``.npy`` and read it back memory-mapped.

    Wall-clock seconds per byte with every core doing the same: measured once per
    process with one thread per core, each writing a 32 MB float64 block (a new file each
    time) to Dask's temporary directory, where :class:`scalenc.engine.reduce.RowCache` writes,
    and reading it back; best of three. The page faults of new pages serialise across
    threads, so one thread alone (3–4 ns/B here) would flatter the cache, and so would a
    small block that stays in the CPU caches.
    """
    block = np.random.default_rng(0).standard_normal((32768, 128))
    root = dask.config.get("temporary-directory", None)
    with tempfile.TemporaryDirectory(prefix="scalenc-rate-", dir=root) as folder:
        names = itertools.count()

        def write_and_read():
            path = os.path.join(folder, f"block-{next(names)}.npy")
            np.save(path, block, allow_pickle=False)
            np.load(path, mmap_mode="r", allow_pickle=False).sum()

        threads = task_threads()[0]
        with ThreadPoolExecutor(threads) as pool:

            def all_at_once():
                list(pool.map(lambda _: write_and_read(), range(threads)))

            seconds = _best_of(all_at_once)
    return seconds / (threads * block.nbytes)


def kernel_seconds_per_row(kernels, U: np.ndarray, dtype) -> float:
    """Seconds per row to evaluate ``kernels`` against U, timed on a sample block.

    The sample's rows are class means plus unit noise (so ranks and distances are those
    of real rows, not of copies of U), in X's dtype, best of three; divided by the threads
    of :func:`~scalenc.engine.cluster.task_threads` (the pass evaluates blocks on every
    core), so that it is wall time per row as the other costs are.
    """
    rng = np.random.default_rng(0)
    size = sample_rows(U.shape[1])
    rows = U[rng.integers(0, U.shape[0], size)]
    sample = (rows + rng.standard_normal(rows.shape, dtype=np.float32)).astype(dtype)
    return _best_of(lambda: embed(kernels, sample, U)) / (size * task_threads()[0])


def cache_memory_refusal(
    *, block_bytes: int, total_bytes: int, task_budget: int, store_budget: int, store: str
) -> str | None:
    """Why the embedding cannot be cached in this memory, or None when it can.

    Parameters
    ----------
    block_bytes : int
        The largest block of Z (rows × M·K × 8).
    total_bytes : int
        All of Z.
    task_budget : int
        Bytes one block task may hold (a worker's budget over its threads).
    store_budget : int
        Bytes the cache may take where it is kept (the workers' budgets together, or the
        temporary directory's free disk space).
    store : str
        Where that is, for the message.

    Examples
    --------
    >>> from scalenc.encoder.plan import cache_memory_refusal
    >>> cache_memory_refusal(block_bytes=10**8, total_bytes=10**9, task_budget=10**9,
    ...                      store_budget=10**10, store="disk") is None
    True
    >>> cache_memory_refusal(block_bytes=10**9, total_bytes=10**10, task_budget=10**9,
    ...                      store_budget=10**11, store="disk")
    'a block of Z (1000 MB) is more than half of what a task may hold (1000 MB)'
    """
    if 2 * block_bytes > task_budget:
        return (
            f"a block of Z ({block_bytes / 1e6:.0f} MB) is more than half of what a task "
            f"may hold ({task_budget / 1e6:.0f} MB)"
        )
    if 2 * total_bytes > store_budget:
        return (
            f"Z ({total_bytes / 1e6:.0f} MB) is more than half of {store} "
            f"({store_budget / 1e6:.0f} MB)"
        )
    return None


def choose_cache_plan(
    *, n_rows: int, read_seconds: float, kernel_seconds: float, cache_seconds: float
) -> dict:
    """The cheaper of ``"cache"`` and ``"recompute"`` for the cross-entropy pass.

    Parameters
    ----------
    n_rows : int
        Rows of X.
    read_seconds : float
        Wall time of pass 1 (one read of X with the class sums).
    kernel_seconds : float
        Seconds per row of the kernels (:func:`kernel_seconds_per_row`).
    cache_seconds : float
        Seconds per row to write and read back the cached Z.

    Returns
    -------
    dict with ``name`` and the estimated seconds of either plan's extra pass.
    """
    recompute = read_seconds + n_rows * kernel_seconds
    cache = n_rows * cache_seconds
    return {
        "name": "cache" if cache <= recompute else "recompute",
        "cache_s": cache,
        "recompute_s": recompute,
    }


def fit_plan(
    X, kernels, U, *, one_pass: bool, cache_embedding, read_seconds: float, budget
) -> dict:
    """The fit's plan after pass 1 (``fit_plan_``): one pass, two, or with several kernels
    cache the embedding or recompute it, chosen by the costs measured now (the first
    pass's ``read_seconds``, the kernels' and the cache's rates) where ``cache_embedding``
    is ``"auto"`` and the cache fits ``budget()`` (the memory a fit may use)."""
    if one_pass:
        return {"name": "one_pass", "passes_over_X": 1}
    if len(kernels) == 1:
        return {"name": "two_pass", "passes_over_X": 2}
    if cache_embedding != "auto":
        name = "cache" if cache_embedding else "recompute"
        return {"name": name, "passes_over_X": 2 if cache_embedding else 3}
    width = len(kernels) * U.shape[0]
    refusal = cache_memory_refusal(**cache_room(X, width, budget()))
    if refusal is not None:
        return {"name": "recompute", "passes_over_X": 3, "memory": refusal}
    if X.shape[0] * width * 8 <= SMALL_CACHE_BYTES:
        return {"name": "cache", "passes_over_X": 2, "cache_bytes": X.shape[0] * width * 8}
    rates = {
        "read_s": read_seconds,
        "kernel_s_per_row": kernel_seconds_per_row(kernels, U, X.dtype),
        "cache_s_per_row": width * 8 * cache_seconds_per_byte(),
    }
    plan = choose_cache_plan(
        n_rows=X.shape[0],
        read_seconds=rates["read_s"],
        kernel_seconds=rates["kernel_s_per_row"],
        cache_seconds=rates["cache_s_per_row"],
    )
    return {**plan, "passes_over_X": 2 if plan["name"] == "cache" else 3, **rates}


def cache_room(X, width: int, budget: dict) -> dict:
    """Sizes of the embedding cache (``width`` columns of float64) and the memory it would
    have: the workers' memory on a cluster, else the free disk of Dask's temporary
    directory; and a task's share of ``budget``."""
    threads, workers = task_threads()
    if uses_distributed():
        store_budget, store = budget["worker"] * workers, "the workers' memory"
    else:
        root = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
        store_budget, store = shutil.disk_usage(root).free, f"the free disk space of {root}"
    return {
        "block_bytes": max(X.chunks[0]) * width * 8,
        "total_bytes": X.shape[0] * width * 8,
        "task_budget": budget["worker"] // threads,
        "store_budget": store_budget,
        "store": store,
    }
