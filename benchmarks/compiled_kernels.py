"""Compiled kernels (numba) beside the NumPy block math they would replace.

Issue 26 puts compiled kernels in scope where NumPy stays far from a stage's floor, and
names two candidates. This script measures both on one thread, best of ``--repeats``,
with the NumPy function that the block math calls today beside a numba kernel written
for the same job (``@njit(nogil=True)``, so that Dask's threads could run it in parallel):

* **Spearman's per-row ranks** (the encoder's third kernel): scalenc's
  ``Spearman().tile`` on a block of b rows × p float32 against K = 10 class means, beside
  a kernel that ranks each row (average ranks of ties, ``np.argsort`` per row), centres
  and scales it and takes its K products, in one pass per row;
* **the k smallest scores of each row of a score tile** (the selection after each
  product of the exact k-NN searches): scalenc's k + 1 row-wise ``argmin`` extractions
  (``math/nearest.py``, CCDR's Nyström extension and k-NN head, k = 4) beside a kernel
  that keeps each row's k + 1 best in a sorted insertion buffer (one pass over the row);
  and nRBFN's soft-KNN selection (k = 20, ``math/neighbors.py``: a threshold from a
  sampled head of each row, the entries under it, near-ties decided on float64
  distances) beside the same insertion kernel, on tiles of 2¹⁹ scores.

Each line gives both times, their ratio (numba ÷ NumPy: below 1 is a gain) and, for the
selection, the time of the product that made the tile. The numba results are checked
against NumPy's (ranks to 1e-12, positions equal). The first call's compilation is timed
separately (``--repeats`` excludes it). Without numba installed, the NumPy figures alone
are printed.

Usage::

    python benchmarks/compiled_kernels.py [--quick] [--repeats N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from scalenc.encoder.kernels import Means, Spearman, Tile
from scalenc.math.nearest import EXACT_TILE_ELEMENTS, _smallest_by_extraction
from scalenc.math.selection import Search, smallest_k

try:
    import numba
except ImportError:  # the NumPy side still runs
    numba = None


def _compile():
    """The two numba kernels (None without numba)."""
    if numba is None:
        return None, None

    @numba.njit(nogil=True)
    def spearman_rows(X, ranks_u, out):
        n, p = X.shape
        K = ranks_u.shape[0]
        r = np.empty(p)
        middle = (p + 1) / 2.0
        for i in range(n):
            row = X[i]
            order = np.argsort(row)
            j = 0
            while j < p:  # a run of equal values takes their average rank
                stop = j + 1
                while stop < p and row[order[stop]] == row[order[j]]:
                    stop += 1
                average = (j + stop + 1) / 2.0
                for t in range(j, stop):
                    r[order[t]] = average - middle
                j = stop
            norm = 0.0
            for t in range(p):
                norm += r[t] * r[t]
            scale = 1.0 / np.sqrt(norm) if norm > 0 else 0.0
            for c in range(K):
                acc = 0.0
                for t in range(p):
                    acc += r[t] * ranks_u[c, t]
                out[i, c] = acc * scale
        return out

    @numba.njit(nogil=True)
    def smallest(score, m, vals, pos):
        c, s = score.shape
        for i in range(c):
            for j in range(m):
                vals[i, j] = np.inf
                pos[i, j] = -1
            worst = np.inf
            for t in range(s):
                v = score[i, t]
                if v < worst:  # insert, keeping the m best sorted (first of equals first)
                    j = m - 1
                    while j > 0 and vals[i, j - 1] > v:
                        vals[i, j] = vals[i, j - 1]
                        pos[i, j] = pos[i, j - 1]
                        j -= 1
                    vals[i, j] = v
                    pos[i, j] = t
                    worst = vals[i, m - 1]
        return vals, pos

    return spearman_rows, smallest


def _best(func, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return min(times)


def _first_call(func):
    t0 = time.perf_counter()
    func()
    return time.perf_counter() - t0


def _ranks_row(b, p, K, repeats, kernel, rng):
    X = rng.standard_normal((b, p)).astype(np.float32)
    means = Means(rng.standard_normal((K, p)).astype(np.float32))
    ranks_u = means.centred_ranks
    reference = Spearman().tile(Tile(X, means)).copy()
    row = {"b": b, "p": p, "K": K}
    row["numpy_s"] = _best(lambda: Spearman().tile(Tile(X, means)), repeats)
    if kernel is not None:
        out = np.empty((b, K))
        row["compile_s"] = _first_call(lambda: kernel(X, ranks_u, out))
        np.testing.assert_allclose(out, reference, rtol=0, atol=1e-12)
        row["numba_s"] = _best(lambda: kernel(X, ranks_u, out), repeats)
    _print("ranks", f"b={b} p={p} K={K}", row)
    return row


def _selection_row(p, s, m, repeats, kernel, rng):
    tile = max(1, EXACT_TILE_ELEMENTS // s)
    Q = rng.standard_normal((tile, p + 1)).astype(np.float32)
    R = rng.standard_normal((s, p + 1)).astype(np.float32)
    buffer = np.empty((tile, s), dtype=np.float32)
    reference = _smallest_by_extraction(Q @ R.T, m)[1]
    row = {"p": p, "s": s, "m": m, "tile": tile}
    row["product_s"] = _best(lambda: np.matmul(Q, R.T, out=buffer), repeats)
    both = _best(lambda: _smallest_by_extraction(np.matmul(Q, R.T, out=buffer), m), repeats)
    row["numpy_s"] = max(both - row["product_s"], 0.0)
    if kernel is not None:
        score = Q @ R.T
        vals, pos = np.empty((tile, m)), np.empty((tile, m), dtype=np.int64)
        row["compile_s"] = _first_call(lambda: kernel(score, m, vals, pos))
        np.testing.assert_array_equal(pos, reference)
        row["numba_s"] = _best(lambda: kernel(score, m, vals, pos), repeats)
    _print("selection", f"p={p} s={s} k+1={m} ({tile}-row tiles)", row)
    return row


def _soft_knn_row(p, s, k, repeats, kernel, rng):
    """nRBFN's soft-KNN selection (:func:`scalenc.math.selection.smallest_k`: the k-th
    smallest of a sampled head of each row as a threshold, the entries under it, near-ties
    decided on float64 distances) beside the numba insertion of the k smallest scores."""
    tile = max(1, EXACT_TILE_ELEMENTS // s)
    Q = rng.standard_normal((tile, p)).astype(np.float32)
    R = rng.standard_normal((s, p)).astype(np.float32)
    q_norms = np.einsum("ij,ij->i", Q, Q, dtype=np.float64)
    r_norms = np.einsum("ij,ij->i", R, R, dtype=np.float64)
    search = Search(Q, R, q_norms, r_norms, k, np.float32)
    score = r_norms.astype(np.float32)[None, :] - 2.0 * (Q @ R.T)
    _, reference = smallest_k(score, k, search)
    row = {"p": p, "s": s, "m": k, "tile": tile}
    row["product_s"] = _best(lambda: Q @ R.T, repeats)
    row["numpy_s"] = _best(lambda: smallest_k(score, k, search), repeats)
    if kernel is not None:
        vals, pos = np.empty((tile, k)), np.empty((tile, k), dtype=np.int64)
        row["compile_s"] = _first_call(lambda: kernel(score, k, vals, pos))
        # the same neighbours wherever the float32 scores are not near-tied
        row["same_positions"] = float(np.mean(np.sort(pos, 1) == np.sort(reference, 1)))
        row["numba_s"] = _best(lambda: kernel(score, k, vals, pos), repeats)
    _print("soft-KNN", f"p={p} s={s} k={k} ({tile}-row tiles)", row)
    return row


def _print(stage, shape, row):
    text = f"{stage:<9} {shape:<34} NumPy {row['numpy_s'] * 1e3:8.3f} ms"
    if "product_s" in row:
        text += f" (product {row['product_s'] * 1e3:.3f} ms)"
    if "numba_s" in row:
        text += (
            f"  numba {row['numba_s'] * 1e3:8.3f} ms  numba ÷ NumPy "
            f"{row['numba_s'] / max(row['numpy_s'], 1e-12):.2f}"
            f"  (first call, with compilation: {row['compile_s']:.2f} s)"
        )
    print(text, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    spearman_rows, smallest = _compile()
    if numba is None:
        print("numba is not installed (pip install numba): NumPy figures only")
    if args.quick:
        rank_shapes, select_shapes, knn_shapes = [(512, 16, 10)], [(32, 500, 5)], [(32, 2000, 20)]
    else:
        rank_shapes = [(32768, 16, 10), (32768, 50, 10), (32768, 256, 10)]
        select_shapes = [
            (32, 5000, 5),
            (100, 500, 5),
            (100, 2000, 5),
            (256, 5000, 5),
        ]
        knn_shapes = [(32, 10000, 20), (256, 10000, 20), (784, 10000, 20)]
    with threadpool_limits(1):
        result = {
            "numba": None if numba is None else numba.__version__,
            "ranks": [
                _ranks_row(*shape, args.repeats, spearman_rows, rng) for shape in rank_shapes
            ],
            "selection": [
                _selection_row(*shape, args.repeats, smallest, rng) for shape in select_shapes
            ],
            "soft_knn": [
                _soft_knn_row(*shape, args.repeats, smallest, rng) for shape in knn_shapes
            ],
        }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
