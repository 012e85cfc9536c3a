"""CCDR's eigen-solve: Lanczos on the normalised adjacency beside shift-invert and dense.

CCDR solves L u = λ D u on the k-NN graph of its subsample (plus the class centres) for
the m + 2 smallest eigenpairs (:func:`scalenc.math.linalg.graph_eigenvectors`). This
script builds that graph exactly as ``CCDR().fit`` does, on the papers' datasets and on
``roofline.py``'s simulations, and solves it three ways, each on one BLAS thread (the
client's setting during the solve):

* ``lanczos``: ARPACK on A = D^{-1/2} G D^{-1/2} for its m + 2 largest eigenvalues
  (``which="LA"``, λ = 1 − μ): sparse products only (what ``fit`` runs first);
* ``shift-invert``: ARPACK on I − A around σ = −10⁻³ with a sparse LU (``fit``'s solver
  before, now its fallback);
* ``dense``: ``scipy.linalg.eigh`` of the dense I − A (the oracle; skipped above
  ``--dense-max`` nodes).

For each it prints seconds, the largest eigenvalue difference from the oracle (shift-invert
where dense is skipped) and the smallest cosine of the principal angles between the
eigenvector subspaces (1 = the same subspace). The component of the graph is taken as a
whole (these graphs are connected).

Usage::

    python benchmarks/ccdr_eigen.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.sparse.csgraph
from sklearn.datasets import make_swiss_roll
from threadpoolctl import threadpool_limits

from scalenc.ccdr import CCDR
from scalenc.ccdr import blocks as cb
from scalenc.math import linalg
from scalenc.simulate import simulate_rows

DATA = Path(
    os.environ.get(
        "SCALENC_DATA_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    )
)


def _load(name: str, s: int, seed: int = 0):
    """Up to s training rows of a papers' dataset, scaled as the papers do."""
    with np.load(DATA / f"{name}.npz") as f:
        X, y = f["X"].astype(np.float64), f["y"]
        train = f["train_idx"] if "train_idx" in f else np.arange(len(y))
    X, y = X[train], y[train]
    if name == "mnist":
        X = X / 255.0
    if name in ("yaleb32", "orl32"):
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    if len(y) > s:
        keep = np.sort(np.random.default_rng(seed).choice(len(y), s, replace=False))
        X, y = X[keep], y[keep]
    return X, y


def _simulated(p: int, s: int, K: int = 5):
    X, y = simulate_rows("uniform_noise", 0, s, p, K, 0, dtype=np.float32)
    return X.astype(np.float64), y


def _manifold(kind: str, s: int, labeled: float = 0.01, seed: int = 0):
    """s points on a 2-d (Swiss roll) or 1-d (helix) manifold in 3-d, two classes by
    position along it, all but a ``labeled`` share of the labels −1."""
    rng = np.random.default_rng(seed)
    if kind == "swiss roll":
        X, t = make_swiss_roll(s, noise=0.05, random_state=seed)
    else:
        t = np.sort(rng.uniform(0, 20, s))
        X = np.c_[np.cos(t), np.sin(t), 0.1 * t] + rng.normal(0, 0.01, (s, 3))
    y = (t > np.median(t)).astype(np.int64)
    return X, np.where(rng.random(s) < labeled, y, -1)


def _problem(X, y, m):
    """G and the number of eigenpairs ``fit`` asks for (m from ``"auto"`` or given)."""
    defaults = CCDR()
    classes = np.unique(y[y >= 0])
    codes = np.where(y >= 0, np.searchsorted(classes, y), -1)
    W, _ = cb.heat_kernel_graph(X, defaults.n_neighbors, defaults.epsilon)
    G = cb.ccdr_matrix(W, codes, classes.size, defaults.beta)
    if m == "auto":
        m, _ = cb.auto_components(X, codes, classes.size)
        m = max(1, min(m, G.shape[0] - 2))
    return G, int(m)


def _solvers(G, k):
    A = linalg.normalised_adjacency(G, np.asarray(G.sum(axis=1)).ravel())

    def lanczos():
        return linalg._lanczos_eigs(A, k)

    def shift_invert():
        return linalg._shift_invert_eigs(A, k)

    def dense():
        L = np.eye(A.shape[0]) - A.toarray()
        return scipy.linalg.eigh(L, subset_by_index=[0, k - 1])

    return {"lanczos": lanczos, "shift-invert": shift_invert, "dense": dense}


def _compare(ref, got):
    lam_r, V_r = ref
    lam, V = got
    o_r, o = np.argsort(lam_r), np.argsort(lam)
    lam_r, V_r, lam, V = lam_r[o_r], V_r[:, o_r], lam[o], V[:, o]
    cos = np.linalg.svd(V_r.T @ V, compute_uv=False)
    return float(np.abs(lam_r - lam).max()), float(cos.min())


def run(cases, dense_max):
    rows = []
    for name, (X, y), m in cases:
        G, m = _problem(X, y, m)
        n_comp, labels = scipy.sparse.csgraph.connected_components(G, directed=False)
        if n_comp > 1:  # fit solves each component alone: time the largest
            largest = np.flatnonzero(labels == np.bincount(labels).argmax())
            G = G[largest][:, largest].tocsr()
        k = m + 2  # graph_eigenvectors asks each component for m + 2
        row = {
            "data": name,
            "nodes": int(G.shape[0]),
            "p": int(X.shape[1]),
            "m": m,
            "components": int(n_comp),
            "seconds": {},
            "max_dlam": {},
            "min_cos": {},
            "failed": [],
        }
        results = {}
        with threadpool_limits(1):
            for method, solve in _solvers(G, k).items():
                if method == "dense" and G.shape[0] > dense_max:
                    continue
                t0 = time.perf_counter()
                out = solve()
                row["seconds"][method] = time.perf_counter() - t0
                if out is not None:
                    results[method] = out
                else:
                    row["failed"].append(method)
        ref_name = "dense" if "dense" in results else "shift-invert"
        for method, out in results.items():
            if method != ref_name:
                row["max_dlam"][method], row["min_cos"][method] = _compare(results[ref_name], out)
        row["reference"] = ref_name
        secs = row["seconds"]
        # what fit pays: Lanczos, and shift-invert after it when it fails
        row["fit_s"] = secs["lanczos"] + (secs["shift-invert"] if row["failed"] else 0.0)
        row["fit_over_shift_invert"] = row["fit_s"] / secs["shift-invert"]
        rows.append(row)
        print(
            f"{name:<24} {row['nodes']:>6} nodes  m={m:<3} "
            + "  ".join(
                f"{k}={v:.2f}s" + (" (failed)" if k in row["failed"] else "")
                for k, v in secs.items()
            )
            + f"  fit's solve {row['fit_s']:.2f}s = {row['fit_over_shift_invert']:.2f}× shift-invert"
            + "  vs "
            + ref_name
            + ": "
            + "  ".join(
                f"{k} dλ={row['max_dlam'][k]:.1e} cos={row['min_cos'][k]:.12f}"
                for k in row["max_dlam"]
            ),
            flush=True,
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="two small simulations (a smoke test; no data files)"
    )
    parser.add_argument("--dense-max", type=int, default=6000, help="largest graph solved densely")
    parser.add_argument(
        "--manifolds",
        action="store_true",
        help="instead: low-dimensional manifolds with 1 %% of the rows labeled (where "
        "Lanczos needs many restarts and fit falls back to shift-invert)",
    )
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    if args.manifolds:
        cases = [
            (f"{kind} ({s}, 1 % labeled)", _manifold(kind, s), "auto")
            for s in (5000, 20000)
            for kind in ("swiss roll", "helix")
        ]
    elif args.quick:
        cases = [
            ("sim p=8 (m=5)", _simulated(8, 1500), 5),
            ("sim p=32 (auto)", _simulated(32, 1500), "auto"),
        ]
    else:
        cases = [
            ("satimage (train, m=14)", _load("satimage", 5000), 14),
            ("satimage (train, auto)", _load("satimage", 5000), "auto"),
            ("usps (5000, auto)", _load("usps", 5000), "auto"),
            ("isolet (5000, auto)", _load("isolet", 5000), "auto"),
            ("mnist (5000, auto)", _load("mnist", 5000), "auto"),
            ("yaleb32 (auto)", _load("yaleb32", 5000), "auto"),
            ("sim p=32 (5000, auto)", _simulated(32, 5000), "auto"),
            ("sim p=256 (5000, auto)", _simulated(256, 5000), "auto"),
            ("mnist (20000, auto)", _load("mnist", 20000), "auto"),
            ("sim p=256 (20000, auto)", _simulated(256, 20000), "auto"),
        ]
    rows = run(cases, args.dense_max)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
